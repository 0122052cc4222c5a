"""Mitogen stays within what it supports, and never drives a reboot.

1. The ansible-core range the pinned Mitogen supports is written once, in a comment of
   requirements.txt (`# mitogen <version> supports ansible-core<specifiers> ...`, with its
   source). These tests fail when the INSTALLED ansible-core (importlib.metadata) or the pinned
   one is outside it, or when the installed Mitogen is not the version the range is for.
2. Every play that can reboot a node (a reboot task of its own, or of a role it runs, its
   handlers included) runs on the stock linear strategy, not Mitogen's (issue 13: Mitogen's
   open issues include reboot handling). The reach is static: a role's entry point and every
   file its include_tasks/import_tasks can name, so it may count a reboot that a `when` never
   lets run, never miss one.
"""

from __future__ import annotations

import configparser
import re
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "requirements.txt"
ANSIBLE_CFG = REPO / "ansible.cfg"
PLAYBOOKS = sorted((REPO / "playbooks").glob("*.yml"))
ROLES = REPO / "roles"

RANGE_COMMENT = re.compile(r"^#\s*mitogen (?P<mitogen>\S+) supports ansible-core(?P<spec>[<>=!~][^\s(]*)")
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s#]+)")
REBOOT_MODULES = {"reboot", "ansible.builtin.reboot", "ansible.legacy.reboot"}
LINEAR = {"linear", "ansible.builtin.linear", "ansible.legacy.linear"}
INCLUDE_TASKS = {
    "include_tasks",
    "import_tasks",
    "ansible.builtin.include_tasks",
    "ansible.builtin.import_tasks",
}
INCLUDE_ROLE = {"include_role", "import_role", "ansible.builtin.include_role", "ansible.builtin.import_role"}
TASK_SECTIONS = ("pre_tasks", "tasks", "post_tasks", "handlers")


class RequirementsError(ValueError):
    """requirements.txt lacks the pin or the range comment these checks read; names file and line."""


def pins(path: Path) -> dict[str, str]:
    return {m["name"].lower(): m["version"] for line in path.read_text().splitlines() if (m := PIN.match(line))}


def mitogen_range(path: Path) -> tuple[str, SpecifierSet]:
    """(Mitogen version, ansible-core specifiers) from the one comment that records them."""
    found = [(n, m) for n, line in enumerate(path.read_text().splitlines(), 1) if (m := RANGE_COMMENT.match(line))]
    if len(found) != 1:
        raise RequirementsError(
            f"{path}: expected one comment `# mitogen <version> supports ansible-core<specifiers>` "
            f"with its source, found {len(found)}"
        )
    line, match = found[0]
    try:
        return match["mitogen"], SpecifierSet(match["spec"])
    except InvalidSpecifier as exc:
        raise RequirementsError(f"{path}:{line}: {match['spec']!r} is not a version specifier: {exc}") from exc


def outside_range(package: str, installed: str, mitogen: str, supported: SpecifierSet) -> str | None:
    """Why `installed` cannot run with that Mitogen, or None when it can."""
    if supported.contains(installed, prereleases=True):
        return None
    return f"{package} {installed} is outside ansible-core{supported}, the range mitogen {mitogen} supports"


def test_installed_ansible_core_is_in_the_range_mitogen_supports():
    mitogen, supported = mitogen_range(REQUIREMENTS)
    assert outside_range("installed ansible-core", version("ansible-core"), mitogen, supported) is None


def test_pinned_ansible_core_is_in_the_range_mitogen_supports():
    mitogen, supported = mitogen_range(REQUIREMENTS)
    pinned = pins(REQUIREMENTS)
    assert pinned["mitogen"] == mitogen, (
        f"{REQUIREMENTS}: the range comment is for mitogen {mitogen}, the pin is {pinned['mitogen']}"
    )
    assert outside_range("pinned ansible-core", pinned["ansible-core"], mitogen, supported) is None


def test_installed_mitogen_is_the_one_the_range_is_for():
    mitogen, _ = mitogen_range(REQUIREMENTS)
    assert version("mitogen") == mitogen, "the venv is stale: run `make venv`"


def test_a_version_outside_the_range_is_named(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("mitogen==1.0\n# mitogen 1.0 supports ansible-core>=2.11,<2.12 (a made-up source)\n")
    mitogen, supported = mitogen_range(requirements)
    assert outside_range("installed ansible-core", "2.11.7", mitogen, supported) is None
    assert outside_range("installed ansible-core", "2.12.0", mitogen, supported) == (
        "installed ansible-core 2.12.0 is outside ansible-core<2.12,>=2.11, the range mitogen 1.0 supports"
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("mitogen==1.0\n", "found 0"),
        ("# mitogen 1.0 supports ansible-core>=2.11\n# mitogen 1.0 supports ansible-core<3\n", "found 2"),
        ("mitogen==1.0\n# mitogen 1.0 supports ansible-core>=two\n", "requirements.txt:2: '>=two' is not a version"),
    ],
)
def test_a_missing_or_bad_range_comment_is_a_clear_error(tmp_path, text, problem):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(text)
    with pytest.raises(RequirementsError, match=re.escape(problem)):
        mitogen_range(requirements)


def _yaml_list(path: Path) -> list[Any]:
    data = yaml.safe_load(path.read_text())
    return data if isinstance(data, list) else []


def _tasks(items: list[Any]) -> Iterator[dict[str, Any]]:
    """Every task of a task list, those inside blocks included."""
    for item in items:
        if not isinstance(item, dict):
            continue
        yield item
        for section in ("block", "rescue", "always"):
            yield from _tasks(item.get(section) or [])


def _task_files(directory: Path, reference: str) -> list[Path]:
    """The files an include_tasks/import_tasks argument can name ({{ ... }} matches any text)."""
    pattern = re.sub(r"\{\{.*?\}\}", "*", reference)
    return sorted(directory.glob(pattern)) if "*" in pattern else [directory / pattern]


def _role_entry(task: dict[str, Any]) -> tuple[str, str] | None:
    for key in INCLUDE_ROLE & task.keys():
        return task[key]["name"], task[key].get("tasks_from", "main")
    return None


class RebootReach:
    """Where a play can reboot: its own tasks, and the roles it runs (tasks and handlers)."""

    def __init__(self, roles: Path) -> None:
        self.roles = roles
        self.seen: set[Path] = set()

    def _where(self, path: Path, task: dict[str, Any]) -> str:
        return f"{path.relative_to(self.roles.parent)}: {task.get('name', '(unnamed)')}"

    def task_list(self, tasks: list[Any], path: Path) -> list[str]:
        found = []
        for task in _tasks(tasks):
            if REBOOT_MODULES & task.keys():
                found.append(self._where(path, task))
            for key in INCLUDE_TASKS & task.keys():
                reference = task[key] if isinstance(task[key], str) else task[key]["file"]
                for included in _task_files(path.parent, reference):
                    found += self.task_file(included)
            if entry := _role_entry(task):
                found += self.role(*entry)
        return found

    def task_file(self, path: Path) -> list[str]:
        if path in self.seen or not path.is_file():
            return []
        self.seen.add(path)
        return self.task_list(_yaml_list(path), path)

    def role(self, name: str, entry: str = "main") -> list[str]:
        """A role run from `entry` can reboot through its tasks or through the handlers it brings."""
        return self.task_file(self.roles / name / "tasks" / f"{entry}.yml") + self.task_file(
            self.roles / name / "handlers" / "main.yml"
        )

    def play(self, play: dict[str, Any], playbook: Path) -> list[str]:
        found = []
        for role in play.get("roles") or []:
            found += self.role(role if isinstance(role, str) else role["role"])
        for section in TASK_SECTIONS:
            found += self.task_list(play.get(section) or [], playbook)
        return found


def _default_strategy() -> str:
    config = configparser.ConfigParser()
    config.read(ANSIBLE_CFG)
    return config.get("defaults", "strategy", fallback="linear")


def plays() -> Iterator[tuple[Path, dict[str, Any]]]:
    for playbook in PLAYBOOKS:
        for play in _yaml_list(playbook):
            if isinstance(play, dict) and "hosts" in play:
                yield playbook, play


def test_the_reboot_reach_follows_includes_roles_and_handlers(tmp_path):
    """The reach is not blind: a reboot two includes deep, one behind a templated file name,
    and one in the handlers of a role that a task includes are all found; a role without one is not."""
    roles = tmp_path / "roles"
    files = {
        "a/tasks/main.yml": [
            {"name": "Go on", "ansible.builtin.include_tasks": "step_{{ ansible_facts['pkg_mgr'] }}.yml"}
        ],
        "a/tasks/step_dnf.yml": [{"name": "Deeper", "ansible.builtin.import_tasks": {"file": "deep.yml"}}],
        "a/tasks/deep.yml": [{"block": [{"name": "Reboot deep", "ansible.builtin.reboot": {}}]}],
        "b/tasks/main.yml": [{"name": "Run c", "ansible.builtin.include_role": {"name": "c", "tasks_from": "quiet"}}],
        "c/tasks/quiet.yml": [{"name": "Nothing", "ansible.builtin.debug": {"msg": "x"}}],
        "c/handlers/main.yml": [{"name": "Reboot from a handler", "reboot": {}}],
        "d/tasks/main.yml": [{"name": "Nothing", "ansible.builtin.debug": {"msg": "x"}}],
    }
    for name, tasks in files.items():
        (roles / name).parent.mkdir(parents=True, exist_ok=True)
        (roles / name).write_text(yaml.safe_dump(tasks))
    assert RebootReach(roles).role("a") == ["roles/a/tasks/deep.yml: Reboot deep"]
    assert RebootReach(roles).play({"roles": ["d", {"role": "b"}]}, tmp_path / "play.yml") == [
        "roles/c/handlers/main.yml: Reboot from a handler"
    ]
    assert RebootReach(roles).role("d") == []


def test_every_play_that_can_reboot_runs_on_the_linear_strategy():
    default = _default_strategy()
    wrong = []
    for playbook, play in plays():
        strategy = play.get("strategy", default)
        reboots = RebootReach(ROLES).play(play, playbook)
        if reboots and strategy not in LINEAR:
            wrong.append(
                f"{playbook.relative_to(REPO)} play {play.get('name')!r} runs on {strategy} and reboots: {reboots}"
            )
    assert not wrong, "set `strategy: ansible.builtin.linear` on these plays, or move the reboot out:\n" + "\n".join(
        wrong
    )
