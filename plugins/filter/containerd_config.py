"""containerd configured through a drop-in file, leaving the site's /etc/containerd/config.toml its own.

{{ config_text | containerd_drop_in_plan(path, glob, cri_settings) }} -> {problems, main_content,
imports_line, imports_regexp, drop_in}

containerd 1.6 and 1.7 (config version 2) read the files listed in `imports` after the main file,
but an imported file replaces a whole plugin section instead of merging its keys
(containerd/containerd#5837; merged per key only from containerd 2.x, containerd/containerd#9982).
A drop-in that only adds the nvidia runtime would therefore drop everything else the main file
sets for the CRI plugin (Debian's CNI bin_dir, a site's registry mirrors, the runc runtime).
The drop-in starts from the main file's whole CRI section and adds the role's settings on top,
as NVIDIA's own `nvidia-ctk runtime configure` does since toolkit 1.18
(NVIDIA/nvidia-container-toolkit pkg/config/engine/containerd/containerd.go, "The starting
content of the destinationConfig is the entire plugins."io.containerd.grpc.v1.cri" section").
The main file only gains the drop-in directory in its `imports` line.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from typing import Any, TypedDict

# The CRI plugin of config version 2, the version containerd 1.6/1.7 packages ship.
CRI_PLUGIN = "io.containerd.grpc.v1.cri"
CONFIG_VERSION = 2
# A top-level `imports` key, written on one line (lineinfile replaces one line).
IMPORTS_REGEXP = r"^\s*imports\s*="
_ONE_LINE_IMPORTS = re.compile(r"^\s*imports\s*=\s*\[[^\n]*\]\s*(?:#[^\n]*)?$")
_TABLE_HEADER = re.compile(r"^\s*\[")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SHORT_ESCAPES = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
HEADER = (
    "# Managed by Ansible (roles/nvidia_container_toolkit): the CRI plugin section of\n"
    "# {main} plus the role's runtimes. containerd 1.x replaces a whole plugin\n"
    "# section from an imported file, so this file carries all of it: change the main file,\n"
    "# then rerun site.yml to carry the change here.\n"
)


class Plan(TypedDict):
    problems: list[str]
    main_content: str | None
    imports_line: str | None
    imports_regexp: str
    drop_in: str


def _string(value: str) -> str:
    """A TOML basic string."""
    escaped = "".join(
        _SHORT_ESCAPES.get(ch) or (f"\\u{ord(ch):04x}" if ord(ch) < 0x20 or ord(ch) == 0x7F else ch) for ch in value
    )
    return f'"{escaped}"'


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _value(value: Any, path: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return repr(float(value))
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(item, f"{path}[{i}]") for i, item in enumerate(value)) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_key(str(k))} = {_value(v, f'{path}.{k}')}" for k, v in value.items()) + "}"
    raise TypeError(f"{path}: {type(value).__name__} has no TOML form here")


def toml_text(data: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> str:
    """`data` as TOML: a table's keys, then its sub-tables, each under its full dotted header."""
    keys = [f"{_key(str(k))} = {_value(v, '.'.join((*prefix, str(k))))}\n" for k, v in data.items() if not _table(v)]
    tables = [(str(name), table) for name, table in data.items() if _table(table)]
    # A table with only sub-tables needs no header of its own; an empty one keeps its header.
    header = prefix and (keys or not tables)
    out = ("[" + ".".join(_key(p) for p in prefix) + "]\n" if header else "") + "".join(keys)
    for name, table in tables:
        out += ("\n" if out else "") + toml_text(table, (*prefix, name))
    return out


def _table(value: Any) -> bool:
    return isinstance(value, Mapping)


def _merged(base: Mapping[str, Any], ours: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `ours` on top: tables merge key by key, any other value of ours replaces base's."""
    merged = dict(base)
    for key, value in ours.items():
        current = merged.get(key)
        merged[key] = _merged(current, value) if _table(current) and _table(value) else value
    return merged


def _imports_problem(text: str, has_imports: bool, path: str, glob: str) -> str | None:
    """The `imports` lines must be one top-level line (or none), so that lineinfile edits the right one."""
    lines = text.splitlines()
    header = next((i for i, line in enumerate(lines) if _TABLE_HEADER.match(line)), len(lines))
    matching = [i for i, line in enumerate(lines) if re.match(IMPORTS_REGEXP, line)]
    if not has_imports and not matching:
        return None
    if has_imports and len(matching) == 1 and matching[0] < header and _ONE_LINE_IMPORTS.match(lines[matching[0]]):
        return None
    return (
        f"{path}: its imports key is not one top-level line (lines {', '.join(str(i + 1) for i in matching)}); "
        f"write it on one line before the first [table], or add {glob!r} to it yourself"
    )


def containerd_drop_in_plan(
    main_text: str | None, main_path: str, drop_in_glob: str, cri_settings: Mapping[str, Any]
) -> Plan:
    """What to write: the main file when it is absent (main_content) or its new imports line
    (imports_line, None when the glob is listed already), the drop-in, and the problems that stop the role."""
    if main_text is None:
        main: dict[str, Any] = {"version": CONFIG_VERSION}
        problems: list[str] = []
    else:
        try:
            main = tomllib.loads(main_text)
        except tomllib.TOMLDecodeError as exc:
            main, problems = {}, [f"{main_path}: not valid TOML ({exc}); containerd cannot read it either"]
        else:
            problems = []
            version = main.get("version", 1)
            if version != CONFIG_VERSION:
                problems.append(
                    f"{main_path}: config version {version}; the role handles version {CONFIG_VERSION} "
                    "(containerd 1.6/1.7), whose imports take drop-in files. Migrate the file to version 2"
                )
            if {"cri", CRI_PLUGIN} & set(main.get("disabled_plugins", [])):
                problems.append(f"{main_path}: disabled_plugins turns off the CRI plugin, which the kubelet talks to")
            imports_problem = _imports_problem(main_text, "imports" in main, main_path, drop_in_glob)
            if imports_problem:
                problems.append(imports_problem)
    imports = list(main.get("imports", []))
    imports_line = None
    if drop_in_glob not in imports:
        imports_line = "imports = [" + ", ".join(_string(item) for item in [*imports, drop_in_glob]) + "]"
    section = main.get("plugins", {}).get(CRI_PLUGIN, {})
    try:
        drop_in = toml_text({"version": CONFIG_VERSION, "plugins": {CRI_PLUGIN: _merged(section, cri_settings)}})
    except TypeError as exc:
        drop_in, problems = "", [*problems, f"{main_path}: {exc}"]
    return {
        "problems": problems,
        "main_content": f"version = {CONFIG_VERSION}\n{imports_line}\n" if main_text is None else None,
        "imports_line": imports_line,
        "imports_regexp": IMPORTS_REGEXP,
        "drop_in": HEADER.format(main=main_path) + drop_in,
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"containerd_drop_in_plan": containerd_drop_in_plan}
