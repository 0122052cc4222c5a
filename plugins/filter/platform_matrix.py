"""Ansible filters over the platform matrix, so playbooks and Python share one set of rules.

{{ '' | platform_matrix }}                  -> the validated matrix as a dict
{{ {'triton_release': '24.05'} | platform_matrix_problems }} -> ["[triton_driver] ..."]
{{ {'gpu_product': 'NVIDIA-H100-80GB-HBM3', 'gpu_count': 8} | platform_matrix_node_facts }}
    -> {"fabric_manager_required": true, "driver_branch": "580", ...}
"""

from __future__ import annotations

import copy
import functools
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

_REPO_ROOT = Path(__file__).resolve().parents[2]
if str(_REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(_REPO_ROOT))

from platform_matrix import (  # noqa: E402
    DEFAULT_PATH,
    Matrix,
    MatrixError,
    Stack,
    check,
    load,
    node_facts,
    pinned_stack,
)

_STACK_FIELDS = {field.name for field in fields(Stack)}


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int) -> Matrix:
    return load(path)


def _load(path: str = "") -> Matrix:
    """Load once per file version: role defaults call the filter many times per host."""
    target = Path(path) if path else DEFAULT_PATH
    try:
        return _load_cached(str(target), target.stat().st_mtime_ns)
    except OSError as exc:
        raise AnsibleFilterError(f"platform matrix: {target}: cannot read the file: {exc.strerror}") from exc
    except MatrixError as exc:
        raise AnsibleFilterError(f"platform matrix: {exc}") from exc


def platform_matrix(path: str = "") -> dict[str, Any]:
    """The whole matrix; `path` defaults to platform_matrix/matrix.yml in this repository."""
    return copy.deepcopy(dict(_load(path).data))


def _stack(matrix: Matrix, choices: dict[str, Any], caller: str) -> Stack:
    """An environment's choices over the matrix pins; "" means "not decided here"."""
    unknown = sorted(set(choices) - _STACK_FIELDS)
    if unknown:
        raise AnsibleFilterError(
            f"{caller}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_STACK_FIELDS))}"
        )
    given = {key: (value if value != "" else None) for key, value in choices.items()}
    return pinned_stack(matrix, **given)


def platform_matrix_problems(choices: dict[str, Any], names: dict[str, str] | None = None, path: str = "") -> list[str]:
    """Problems with an environment's choices; keys not given take the matrix pins.

    `names` maps Stack fields to the Ansible variables that hold them, so that each message
    starts with the variables to fix: "gpu_fleet_triton_release, nvidia_driver_version: ...".
    """
    matrix = _load(path)
    stack = _stack(matrix, choices, "platform_matrix_problems")
    names = names or {}
    messages = []
    for problem in check(matrix, stack):
        variables = [names[field] for field in problem.fields if field in names]
        messages.append(f"{', '.join(variables)}: {problem}" if variables else str(problem))
    return messages


def platform_matrix_node_facts(choices: dict[str, Any], path: str = "") -> dict[str, object]:
    """What the roles need from the matrix for one node: driver branch and source, whether it needs
    Fabric Manager, its kernel flavour and headers metapackage ("" where unknown: see the problems)."""
    matrix = _load(path)
    return node_facts(matrix, _stack(matrix, choices, "platform_matrix_node_facts"))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "platform_matrix": platform_matrix,
            "platform_matrix_problems": platform_matrix_problems,
            "platform_matrix_node_facts": platform_matrix_node_facts,
        }
