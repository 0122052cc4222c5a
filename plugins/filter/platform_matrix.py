"""Ansible filters over the platform matrix, so playbooks and Python share one set of rules.

{{ '' | platform_matrix }}                  -> the validated matrix as a dict
{{ {'triton_release': '24.05'} | platform_matrix_problems }} -> ["[triton_driver] ..."]
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

from platform_matrix import DEFAULT_PATH, Matrix, MatrixError, Stack, check, load, pinned_stack  # noqa: E402

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


def platform_matrix_problems(choices: dict[str, Any], names: dict[str, str] | None = None, path: str = "") -> list[str]:
    """Problems with an environment's choices; keys not given take the matrix pins.

    `names` maps Stack fields to the Ansible variables that hold them, so that each message
    starts with the variables to fix: "gpu_fleet_triton_release, nvidia_driver_version: ...".
    """
    unknown = sorted(set(choices) - _STACK_FIELDS)
    if unknown:
        raise AnsibleFilterError(
            f"platform_matrix_problems: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_STACK_FIELDS))}"
        )
    matrix = _load(path)
    given = {key: (value if value != "" else None) for key, value in choices.items()}
    names = names or {}
    messages = []
    for problem in check(matrix, pinned_stack(matrix, **given)):
        variables = [names[field] for field in problem.fields if field in names]
        messages.append(f"{', '.join(variables)}: {problem}" if variables else str(problem))
    return messages


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"platform_matrix": platform_matrix, "platform_matrix_problems": platform_matrix_problems}
