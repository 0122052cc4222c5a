"""Placeholder markers: `<fill: what>`, written where an environment still needs a value of its own.

scripts/new-environment writes one in place of each site-specific value it copies
(gpu_serving.placeholders lists them); the stack config refuses every marker left, in the
stack config and in the inventory it names (config.py), before anything is rendered or created.
No real value contains `<fill:`, so finding one is finding a placeholder.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

_TAG = "<fill:"


def marker(what: str) -> str:
    """The placeholder for a value described by `what`."""
    return f"{_TAG} {what}>"


def is_marker(value: object) -> bool:
    return isinstance(value, str) and _TAG in value


def in_data(data: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """(dotted key, marker) of every marker among the values of parsed YAML or JSON data."""
    if is_marker(data):
        yield key, data
    elif isinstance(data, dict):
        for name, value in data.items():
            yield from in_data(value, f"{key}.{name}" if key else str(name))
    elif isinstance(data, list):
        for index, item in enumerate(data):
            yield from in_data(item, f"{key}[{index}]")


class _InventoryLoader(yaml.SafeLoader):
    """Ansible's tagged values (`!vault`, `!unsafe`) load as None: only plain strings are markers."""


_InventoryLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def in_inventory(folder: Path) -> Iterator[tuple[Path, str, str]]:
    """(file, dotted key, marker) of every marker in the YAML files of an Ansible inventory."""
    if not folder.is_dir():
        return
    for path in sorted(folder.rglob("*")):
        if path.suffix not in (".yml", ".yaml") or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        try:
            data = yaml.load(text, Loader=_InventoryLoader)
        except yaml.YAMLError:
            found = [f"line {number}" for number, line in enumerate(text.splitlines(), 1) if _TAG in line]
            yield from ((path, where, _TAG) for where in found)
            continue
        for key, value in in_data(data):
            yield path, key, value
