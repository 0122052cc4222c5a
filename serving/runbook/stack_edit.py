"""A checked text edit of one nested key of a Pulumi stack file, e.g. `gpu-serving:triton.replicas.max`.

The edit changes the value's text in place and keeps every other line, comments included (PyYAML
drops comments; ruamel.yaml would re-indent the file's sequences and fold long lines). It follows
the file's block mappings down to the key; a value written as a flow mapping on one line
(`replicas: {min: 2, max: 16}`) is rewritten as a flow mapping with the one field changed, its
trailing comment kept; a key missing from a block mapping that exists is added as that mapping's
first entry. Both texts are then parsed, and the new one must equal the old one with that one key
set; otherwise, or when the key cannot be placed, StackEditError names the file and the key and
nothing is written.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import yaml

Scalar = str | int


class StackEditError(ValueError):
    """The key cannot be placed by a text edit; the message names the file and the key."""


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _content(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _split_comment(value: str) -> tuple[str, str]:
    """(value, comment) of what follows `key:` on a line: the comment is a `#` after a space,
    outside quotes."""
    quote = ""
    for index, char in enumerate(value):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or value[index - 1] in " \t"):
            return value[:index].rstrip(), value[index:]
    return value.rstrip(), ""


def scalar_text(value: Scalar) -> str:
    """A scalar as YAML reads it back unchanged: integers bare, strings double-quoted ("24.05"
    bare would be the float 24.05)."""
    return str(value) if isinstance(value, int) else json.dumps(value)


def _flow_text(mapping: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{key}: {scalar_text(value)}" for key, value in mapping.items()) + "}"


def _block_end(lines: list[str], start: int) -> int:
    """The index after the block of the key at `start` (deeper lines, blank lines and comments)."""
    indent = _indent(lines[start])
    end = start + 1
    while end < len(lines) and (not _content(lines[end]) or _indent(lines[end]) > indent):
        end += 1
    return end


def _find(lines: list[str], start: int, end: int, key: str) -> int | None:
    """The line of `key` among the entries of the block lines[start:end] (those at its least indent)."""
    entries = [i for i in range(start, end) if _content(lines[i])]
    if not entries:
        return None
    indent = min(_indent(lines[i]) for i in entries)
    pattern = re.compile(rf"^ {{{indent}}}{re.escape(key)}:(\s|$)")
    return next((i for i in entries if pattern.match(lines[i])), None)


def _set(data: dict[str, Any], keys: tuple[str, ...], value: Scalar) -> None:
    for key in keys[:-1]:
        data = data[key]
    data[keys[-1]] = value


def set_value(source: str, text: str, keys: tuple[str, ...], value: Scalar) -> str:
    """`text` (the stack file `source`) with config[keys[0]][keys[1]]... set to `value`."""
    dotted = ".".join(keys)
    try:
        before = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise StackEditError(f"{source}: not valid YAML: {err}") from None
    config = before.get("config") if isinstance(before, dict) else None
    if not isinstance(config, dict):
        raise StackEditError(f"{source}: the stack file has no `config:` mapping")
    node: Any = config
    for depth, key in enumerate(keys[:-1]):
        node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            where = ".".join(keys[: depth + 1])
            raise StackEditError(f"{source}: {where}: not found, or not a mapping: no place for {dotted}")
    expected = copy.deepcopy(before)
    _set(expected["config"], keys, value)
    if expected == before:
        return text
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    new = _edited(source, lines, keys, value)
    if yaml.safe_load(new) != expected:
        raise StackEditError(f"{source}: {dotted}: the edit would change other keys too; edit the file by hand")
    return new


def _edited(source: str, lines: list[str], keys: tuple[str, ...], value: Scalar) -> str:
    dotted = ".".join(keys)
    top = next((i for i, line in enumerate(lines) if re.match(r"^config:\s*(#.*)?$", line)), None)
    if top is None:
        raise StackEditError(f"{source}: no `config:` line at the top level: no place for {dotted}")
    start, end = top + 1, _block_end(lines, top)
    for depth, key in enumerate(keys[:-1]):
        line = _find(lines, start, end, key)
        if line is None:
            raise StackEditError(
                f"{source}: {'.'.join(keys[: depth + 1])}: not a line of its own: no place for {dotted}"
            )
        if _value(lines[line], key)[0]:
            return _edited_flow(source, lines, line, keys, depth, value)
        start, end = line + 1, _block_end(lines, line)
    key = keys[-1]
    line = _find(lines, start, end, key)
    if line is None:
        entries = [i for i in range(start, end) if _content(lines[i])]
        if not entries:
            raise StackEditError(f"{source}: {dotted}: its mapping has no entry to align with: edit the file by hand")
        lines.insert(start, f"{' ' * _indent(lines[entries[0]])}{key}: {scalar_text(value)}\n")
        return "".join(lines)
    inline, suffix = _value(lines[line], key)
    if not inline:
        raise StackEditError(f"{source}: {dotted}: a block, not a value: edit the file by hand")
    lines[line] = f"{_head(lines[line], key)}{key}: {scalar_text(value)}{suffix}\n"
    return "".join(lines)


def _head(line: str, key: str) -> str:
    return line.partition(f"{key}:")[0]


def _value(line: str, key: str) -> tuple[str, str]:
    """(the value's text, the trailing comment with its two spaces, or "") of the line of `key`."""
    inline, comment = _split_comment(line.rstrip("\n").partition(f"{key}:")[2])
    return inline.strip(), f"  {comment}" if comment else ""


def _edited_flow(source: str, lines: list[str], line: int, keys: tuple[str, ...], depth: int, value: Scalar) -> str:
    """The value of keys[depth] is a one-line flow mapping of scalars: rewrite it with the change."""
    key = keys[depth]
    inline, suffix = _value(lines[line], key)
    try:
        mapping = yaml.safe_load(inline)
    except yaml.YAMLError:
        mapping = None
    if (
        not isinstance(mapping, dict)
        or len(keys) != depth + 2
        or not all(isinstance(v, str | int) and not isinstance(v, bool) for v in mapping.values())
    ):
        raise StackEditError(
            f"{source}: {'.'.join(keys[: depth + 1])}: not a one-line mapping of values: edit the file by hand"
        )
    mapping[keys[-1]] = value
    lines[line] = f"{_head(lines[line], key)}{key}: {_flow_text(mapping)}{suffix}\n"
    return "".join(lines)
