"""The target environment: how many GPUs a Triton pod gets, read from the Pulumi stack file.

`pulumi/Pulumi.<env>.yaml` carries, under `config`, the key `gpu-serving:triton`: a mapping
whose integer `gpus` is the GPUs per Triton pod (0: the environment schedules no GPUs).
"""

from __future__ import annotations

from pathlib import Path

import yaml

STACK_KEY = "gpu-serving:triton"
GPUS_FIELD = "gpus"


class TargetEnvError(ValueError):
    """The stack file is missing or does not say how many GPUs a Triton pod gets."""


def stack_file(pulumi_dir: Path, env: str) -> Path:
    return pulumi_dir / f"Pulumi.{env}.yaml"


def gpus_for_env(pulumi_dir: Path, env: str) -> int:
    path = stack_file(pulumi_dir, env)
    if not path.is_file():
        raise TargetEnvError(f"{path}: stack file of environment '{env}' not found (it holds config key {STACK_KEY})")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise TargetEnvError(f"{path}: not valid YAML: {err}") from None
    config = data.get("config") if isinstance(data, dict) else None
    if not isinstance(config, dict) or STACK_KEY not in config:
        raise TargetEnvError(f"{path}: config key '{STACK_KEY}' is missing (expected config.{STACK_KEY}.{GPUS_FIELD})")
    triton = config[STACK_KEY]
    if not isinstance(triton, dict) or GPUS_FIELD not in triton:
        raise TargetEnvError(f"{path}: config key '{STACK_KEY}' must be a mapping with an integer '{GPUS_FIELD}'")
    gpus = triton[GPUS_FIELD]
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise TargetEnvError(f"{path}: '{STACK_KEY}.{GPUS_FIELD}' must be an integer >= 0, got {gpus!r}")
    return gpus
