"""Catch typo'd role variables: names with a role's prefix that no argument spec declares."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml


def unknown_role_variables(names: Iterable[str], known: Iterable[str], prefixes: Iterable[str]) -> list[str]:
    """One message per variable that carries a known prefix but is declared nowhere."""
    known_set = set(known)
    prefix_tuple = tuple(prefixes)
    messages = []
    for name in sorted(set(names)):
        prefix = next((p for p in prefix_tuple if name.startswith(p)), None)
        if prefix is None or name in known_set:
            continue
        # Compare what follows the shared prefix, so that the prefix alone never looks like a match.
        siblings = {
            known_name.removeprefix(prefix): known_name for known_name in known_set if known_name.startswith(prefix)
        }
        hint = difflib.get_close_matches(name.removeprefix(prefix), siblings, n=1, cutoff=0.7)
        suggestion = f" (did you mean {siblings[hint[0]]}?)" if hint else ""
        messages.append(f"{name}: no role declares this variable{suggestion}")
    return messages


def declared_role_variables(roles_dir: str) -> list[str]:
    """Every option name in the meta/argument_specs.yml of every role under `roles_dir`."""
    names: list[str] = []
    for spec_file in sorted(Path(roles_dir).glob("*/meta/argument_specs.yml")):
        spec = yaml.safe_load(spec_file.read_text(encoding="utf-8")) or {}
        for entry in spec.get("argument_specs", {}).values():
            names.extend((entry.get("options") or {}).keys())
    return names


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"unknown_role_variables": unknown_role_variables, "declared_role_variables": declared_role_variables}
