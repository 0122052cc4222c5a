"""`scripts/new-environment NAME --from ENV`: a new environment's stack file and inventory.

Copies pulumi/Pulumi.ENV.yaml to pulumi/Pulumi.NAME.yaml, with `fleetInventory:
../inventories/NAME` and a marker (gpu_serving.markers) in place of each site-specific value
(gpu_serving.placeholders), and ENV's inventory to inventories/NAME: its group_vars as they are
and a hosts.yml with one marker per host group. Then prints every placeholder to fill (file,
key, what) and the secrets to set. What belongs to ENV alone is not copied: its hosts
(hosts.yml, host_vars/), its secrets (`secure:` values, the secrets provider's keys), its model
release (`gpu-serving:modelRelease`, which lies in ENV's model store).

The stack file is edited as text, so its comments stay; the edited text must parse to the copy
with exactly those changes, or nothing is written. Refused with exit 2, writing nothing: a NAME
that is not an environment name or whose stack file or inventory exists; an ENV without a stack
file, or whose stack config does not pass (config.py).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpu_serving import config, markers, placeholders
from gpu_serving.fleet import FleetError
from monitoring import alerting

EXIT_REFUSED = 2
# It names the stack, pulumi/Pulumi.NAME.yaml, inventories/NAME and deploy/serving/NAME.
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
MODEL_RELEASE = "modelRelease"
DEFAULT_HOST_GROUPS = ("gpu_nodes",)  # the group every playbook runs on


class Refused(ValueError):
    """The environment cannot be made as asked; nothing was written."""


@dataclass(frozen=True)
class Fill:
    """One placeholder the new environment has: where, and what to put there."""

    file: str  # relative to the repository
    key: str
    what: str


@dataclass
class Plan:
    """Everything the new environment is, before any of it is written."""

    files: dict[Path, bytes] = field(default_factory=dict)
    fills: list[Fill] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # what of ENV was not copied, and why


def _repository() -> Path:
    return config.PULUMI_DIR.parent


def _relative(path: Path) -> str:
    return path.relative_to(_repository()).as_posix()


def _entry(node: yaml.Node, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    """The key and value nodes of `key` in a mapping node."""
    if isinstance(node, yaml.MappingNode):
        for name, value in node.value:
            if isinstance(name, yaml.ScalarNode) and name.value == key:
                return name, value
    return None


def _at(node: yaml.Node, path: tuple[str, ...]) -> yaml.ScalarNode | None:
    for key in path:
        found = _entry(node, key)
        if found is None:
            return None
        node = found[1]
    return node if isinstance(node, yaml.ScalarNode) else None


def _is_secure(value: yaml.Node) -> bool:
    return _entry(value, "secure") is not None and len(value.value) == 1


class _StackText:
    """Replacements and removals on the stack file's text, applied at once from the end."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.edits: list[tuple[int, int, str]] = []

    def _drop_lines(self, first: int, last: int) -> None:
        self.edits.append((self.starts[first], self.starts[last + 1], ""))

    def replace(self, node: yaml.ScalarNode, value: str) -> None:
        self.edits.append((node.start_mark.index, node.end_mark.index, json.dumps(value)))

    def remove(self, key: yaml.Node, value: yaml.Node) -> None:
        """The key's lines and its value's; a nested key's comment lines right above it go too (a
        top-level key's belong to the file's opening comment, which header() replaces)."""
        first, indent = key.start_mark.line, key.start_mark.column
        while indent and first and self.lines[first - 1].startswith(" " * indent + "#"):
            first -= 1
        # A block value ends where the next key starts: the comments before that key are its own.
        last = self.text[: value.end_mark.index].rstrip().count("\n")
        while last > key.start_mark.line and _blank_or_comment(self.lines[last]):
            last -= 1
        self._drop_lines(first, last)

    def header(self, before: int, lines: list[str]) -> None:
        """Replace the comment lines above line `before` (the config key) with these."""
        for index in range(before):
            if self.lines[index].strip() in ("", "---") or self.lines[index].startswith("#"):
                self._drop_lines(index, index)
        self.edits.append((0, 0, "".join(f"{line}\n" for line in ["---", *lines])))

    def result(self) -> str:
        text = self.text
        for start, end, new in sorted(self.edits, reverse=True):
            text = text[:start] + new + text[end:]
        return text


def _blank_or_comment(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def _secret_commands(name: str) -> list[str]:
    """`pulumi config set --secret` of each stack secret: Grafana's password, then the receivers' URLs."""
    receivers = alerting.secret_keys(config.alerting_config())
    values = ["grafanaAdminPassword", *(f"{config.receiver_secret_key(key)} URL" for key in receivers)]
    return [f"pulumi config set --secret {value} -s {name}" for value in values]


def _stack(plan: Plan, name: str, source: str, path: Path) -> None:
    """The new stack file, in `plan`."""
    text = path.read_text(encoding="utf-8")
    root = yaml.compose(text)
    expected = yaml.safe_load(text)
    edit = _StackText(text)
    target = config.stack_file(name)
    for key, value in list(root.value):
        if key.value != "config":
            edit.remove(key, value)
            del expected[key.value]
            plan.dropped.append(f"{key.value}: a setting of {source}'s stack itself, not of its config")
    found = _entry(root, "config")
    if found is None or not isinstance(found[1], yaml.MappingNode):
        raise Refused(f"{_relative(path)}: `config:` is not a mapping of its own lines; copy it by hand")
    config_key, entries = found
    for key, value in list(entries.value):
        if key.value == f"{config.PROJECT}:{MODEL_RELEASE}":
            why = f"a release in {source}'s model store; publish one with scripts/release_model publish --env {name}"
        elif _is_secure(value):
            why = f"a secret of {source}'s stack; set this stack's own (below)"
        else:
            continue
        edit.remove(key, value)
        del expected["config"][key.value]
        plan.dropped.append(f"{key.value}: {why}")
    inventory = f"../inventories/{name}"
    edit.replace(_at(entries, (f"{config.PROJECT}:fleetInventory",)), inventory)
    expected["config"][f"{config.PROJECT}:fleetInventory"] = inventory
    for placeholder in placeholders.STACK:
        full = (f"{config.PROJECT}:{placeholder.path[0]}", *placeholder.path[1:])
        node = _at(entries, full)
        if node is None:
            continue
        value = markers.marker(placeholder.what)
        edit.replace(node, value)
        parent = expected["config"]
        for part in full[:-1]:
            parent = parent[part]
        parent[full[-1]] = value
        plan.fills.append(Fill(_relative(target), f"{config.PROJECT}:{placeholder.key}", placeholder.what))
    edit.header(
        config_key.start_mark.line,
        [
            f"# {name}: a new environment, written by scripts/new-environment from Pulumi.{source}.yaml.",
            f'# Each "<fill: ...>" here and in inventories/{name}/ is a placeholder to fill (the script',
            f"# listed them); `make render ENV={name}` and `pulumi up` refuse while one remains. The",
            "# secrets, set once per stack in pulumi/ (never in git):",
            *(f"#   {command}" for command in _secret_commands(name)),
        ],
    )
    new = edit.result()
    if yaml.safe_load(new) != expected:
        raise Refused(f"{_relative(path)}: copying it as text would change more than the placeholders; copy it by hand")
    plan.files[target] = new.encode("utf-8")


def _host_groups(inventory: Path) -> list[str]:
    """The groups with hosts in the inventory's hosts.yml (the lab's is written by scripts/lab)."""
    path = inventory / placeholders.HOSTS_FILE
    try:
        children = (yaml.safe_load(path.read_text(encoding="utf-8")) or {})["all"]["children"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return list(DEFAULT_HOST_GROUPS)
    groups = [group for group, body in children.items() if isinstance(body, Mapping) and "hosts" in body]
    return groups or list(DEFAULT_HOST_GROUPS)


def _inventory(plan: Plan, name: str, source: str, inventory: Path) -> None:
    """The new inventory, in `plan`: the group_vars as they are, hosts.yml with placeholders."""
    target = _repository() / "inventories" / name
    for path in sorted(inventory.rglob("*")):
        relative = path.relative_to(inventory)
        if relative.parts[0] == "group_vars":
            if path.is_file():
                plan.files[target / relative] = path.read_bytes()
        elif len(relative.parts) == 1:
            plan.dropped.append(f"{_relative(path)}: {source}'s own hosts")
    hosts: dict[str, Any] = {}
    for group in _host_groups(inventory):
        what = placeholders.hosts_what(group)
        hosts[group] = {"hosts": markers.marker(what)}
        key = f"all.children.{group}.hosts"
        plan.fills.append(Fill(_relative(target / placeholders.HOSTS_FILE), key, what))
    text = yaml.safe_dump({"all": {"children": hosts}}, sort_keys=False, width=1000)
    header = (
        f"---\n# The hosts of {name} (scripts/new-environment): replace each placeholder with the group's\n"
        f"# hosts. `make render ENV={name}` and `pulumi up` refuse while one remains.\n"
    )
    plan.files[target / placeholders.HOSTS_FILE] = (header + text).encode("utf-8")


def plan(name: str, source: str) -> Plan:
    """The new environment `name`, copied from stack `source`; Refused when it cannot be."""
    if not NAME.match(name):
        raise Refused(
            f"{name!r} is not an environment name: lower-case letters, digits and '-', at most 63, starting "
            "and ending with a letter or digit (it names the stack, its inventory and deploy/serving/NAME)"
        )
    for existing in (config.stack_file(name), _repository() / "inventories" / name):
        if existing.exists():
            raise Refused(f"{_relative(existing)} exists already: {name!r} is not a new environment")
    path = config.stack_file(source)
    if not NAME.match(source) or not path.is_file():
        known = ", ".join(config.stack_names())
        raise Refused(f"--from {source}: there is no stack file pulumi/Pulumi.{source}.yaml (stacks: {known})")
    try:
        config.from_stack_file(source)
    except (config.ConfigError, FleetError) as exc:
        raise Refused(f"--from {source}: {exc}") from exc
    result = Plan()
    _stack(result, name, source, path)
    inventory = yaml.safe_load(path.read_text(encoding="utf-8"))["config"][f"{config.PROJECT}:fleetInventory"]
    _inventory(result, name, source, (config.PULUMI_DIR / inventory).resolve())
    return result


def write(result: Plan) -> None:
    for path, content in result.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def report(result: Plan, name: str, source: str) -> str:
    lines = [
        f"new-environment: wrote pulumi/Pulumi.{name}.yaml and inventories/{name}/ from {source}",
        "",
        f"Fill every placeholder (`make render ENV={name}` and `pulumi up` refuse while one remains):",
    ]
    for fill in result.fills:
        lines += [f"  {fill.file}: {fill.key}", f"      {fill.what}"]
    if result.dropped:
        lines += ["", f"Not copied from {source}:", *(f"  {what}" for what in result.dropped)]
    lines += [
        "",
        "Then the stack and its secrets (never in git), in pulumi/:",
        f"  pulumi stack init {name}",
        *(f"  {command}" for command in _secret_commands(name)),
        "",
        f"and render: make render ENV={name}; make render-addons INVENTORY=inventories/{name}; make docs; commit;"
        f" pulumi up -s {name}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write a new environment's stack file and inventory, copied from another environment's "
        "with a placeholder for each value of that site's own, and list the placeholders to fill."
    )
    parser.add_argument("name", metavar="NAME", help="the new environment: names its stack, inventory and render")
    parser.add_argument("--from", dest="source", metavar="ENV", required=True, help="the stack to copy, e.g. prod")
    args = parser.parse_args(argv)
    try:
        result = plan(args.name, args.source)
    except Refused as exc:
        print(f"new-environment: {exc}; nothing written", file=sys.stderr)
        return EXIT_REFUSED
    write(result)
    print(report(result, args.name, args.source))
    return 0


if __name__ == "__main__":
    sys.exit(main())
