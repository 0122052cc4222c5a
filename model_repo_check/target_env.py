"""The target environment: how many GPUs a Triton pod gets and which Triton release it runs.

`pulumi/Pulumi.<env>.yaml` carries, under `config`, the key `gpu-serving:triton`: a mapping
whose integer `gpus` is the GPUs per Triton pod (0: the environment schedules no GPUs). The
release is read as the stack does (pulumi/gpu_serving/config.py): `gpu-serving:triton.release`
where the stack pins one, else the fleet's `gpu_fleet_triton_release` in
`<gpu-serving:fleetInventory>/group_vars/gpu_nodes/fleet.yml` (the path relative to the stack
file's folder). A canary on another release (`canary.release`) is not read here.
"""

from __future__ import annotations

from pathlib import Path

import yaml

STACK_KEY = "gpu-serving:triton"
GPUS_FIELD = "gpus"
RELEASE_FIELD = "release"
INVENTORY_KEY = "gpu-serving:fleetInventory"
FLEET_FILE = Path("group_vars/gpu_nodes/fleet.yml")
FLEET_RELEASE = "gpu_fleet_triton_release"


class TargetEnvError(ValueError):
    """The stack file is missing or does not say how many GPUs a Triton pod gets."""


def stack_file(pulumi_dir: Path, env: str) -> Path:
    return pulumi_dir / f"Pulumi.{env}.yaml"


def _yaml(path: Path, what: str) -> object:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise TargetEnvError(f"{path}: cannot read the {what}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise TargetEnvError(f"{path}: not valid YAML: {err}") from None


def _stack_config(pulumi_dir: Path, env: str) -> tuple[Path, dict[str, object], dict[str, object]]:
    """The stack file, its `config` mapping and the `gpu-serving:triton` mapping in it."""
    path = stack_file(pulumi_dir, env)
    if not path.is_file():
        raise TargetEnvError(f"{path}: stack file of environment '{env}' not found (it holds config key {STACK_KEY})")
    data = _yaml(path, "stack file")
    config = data.get("config") if isinstance(data, dict) else None
    if not isinstance(config, dict) or STACK_KEY not in config:
        raise TargetEnvError(f"{path}: config key '{STACK_KEY}' is missing (expected config.{STACK_KEY}.{GPUS_FIELD})")
    triton = config[STACK_KEY]
    if not isinstance(triton, dict):
        raise TargetEnvError(f"{path}: config key '{STACK_KEY}' must be a mapping with an integer '{GPUS_FIELD}'")
    return path, config, triton


def release_for_env(pulumi_dir: Path, env: str) -> str:
    """The Triton release (NGC tag, e.g. "24.05") the environment's Triton pods run."""
    path, config, triton = _stack_config(pulumi_dir, env)
    if RELEASE_FIELD in triton:
        release = triton[RELEASE_FIELD]
        if not isinstance(release, str):
            raise TargetEnvError(f"{path}: '{STACK_KEY}.{RELEASE_FIELD}' must be a release tag string, got {release!r}")
        return release
    inventory = config.get(INVENTORY_KEY)
    if not isinstance(inventory, str):
        raise TargetEnvError(
            f"{path}: no Triton release: neither '{STACK_KEY}.{RELEASE_FIELD}' nor '{INVENTORY_KEY}' "
            f"(whose {FLEET_FILE} sets {FLEET_RELEASE}) is set"
        )
    fleet = (path.parent / inventory / FLEET_FILE).resolve()
    data = _yaml(fleet, f"fleet facts of '{INVENTORY_KEY}: {inventory}'")
    release = data.get(FLEET_RELEASE) if isinstance(data, dict) else None
    if not isinstance(release, str):
        raise TargetEnvError(f"{fleet}: {FLEET_RELEASE} must be a release tag string, got {release!r}")
    return release


def gpus_for_env(pulumi_dir: Path, env: str) -> int:
    path, _, triton = _stack_config(pulumi_dir, env)
    if GPUS_FIELD not in triton:
        raise TargetEnvError(f"{path}: config key '{STACK_KEY}' must be a mapping with an integer '{GPUS_FIELD}'")
    gpus = triton[GPUS_FIELD]
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise TargetEnvError(f"{path}: '{STACK_KEY}.{GPUS_FIELD}' must be an integer >= 0, got {gpus!r}")
    return gpus
