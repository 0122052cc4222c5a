"""The fleet facts a stack deploys onto, read from an Ansible inventory's gpu_nodes group_vars."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

FLEET_FILE = Path("group_vars/gpu_nodes/fleet.yml")


class FleetError(ValueError):
    """An unreadable or malformed fleet.yml: the message names the file and the variable."""


@dataclass(frozen=True)
class Fleet:
    path: Path
    gpu_count: int
    gpu_product: str
    triton_release: str
    cuda_forward_compat: bool


def _require(data: dict[str, Any], path: Path, key: str, kind: type) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise FleetError(f"{path}: {key} must be a {kind.__name__}, got {value!r}")
    return value


def load_fleet(inventory: Path) -> Fleet:
    path = inventory / FLEET_FILE
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise FleetError(f"{path}: cannot read the fleet facts: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise FleetError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise FleetError(f"{path}: must be a mapping of gpu_fleet_* variables")
    return Fleet(
        path=path,
        gpu_count=_require(data, path, "gpu_fleet_gpu_count", int),
        gpu_product=_require(data, path, "gpu_fleet_gpu_product", str),
        triton_release=_require(data, path, "gpu_fleet_triton_release", str),
        cuda_forward_compat=_require(data, path, "gpu_fleet_cuda_forward_compat", bool),
    )
