"""The compliance suite's fixtures and its report.

`node` collects one node's facts with a single remote command (tests/compliance/remote.py)
and resolves what the node must look like (expectations.py). Every test turns one check's
Outcome into pass, fail or skip; the rows are written to --compliance-report-dir at the end.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import testinfra.host
from testinfra.utils.ansible_runner import AnsibleRunner

import gpu_health.probe
import platform_matrix
from gpu_health.checks import Outcome
from tests.compliance import node_checks, remote, report
from tests.compliance.expectations import NodeExpectation, node_variables, probe_spec, resolve

REPO = Path(__file__).resolve().parents[2]
os.environ.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))

ROWS = pytest.StashKey[list[report.Row]]()
NODES = pytest.StashKey[dict[str, "Node | Exception"]]()
REPORT_PATHS = pytest.StashKey[tuple[Path, Path]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("compliance")
    group.addoption("--compliance-report-dir", default="reports", help="where compliance.json/.md go (reports)")
    group.addoption(
        "--compliance-node",
        default=None,
        help="inventory name of a local:// host (default: this machine's hostname)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[ROWS] = []
    config.stash[NODES] = {}


@dataclass(frozen=True)
class Node:
    name: str
    facts: dict[str, Any]
    expected: NodeExpectation


def _inventory_name(host: testinfra.host.Host, config: pytest.Config) -> tuple[str, dict[str, Any]]:
    """The host's inventory name and its merged inventory variables."""
    inventory = config.option.ansible_inventory
    if host.backend.NAME == "ansible":
        return host.backend.host, host.backend.get_variables()
    name = config.option.compliance_node or socket.gethostname()
    runner = AnsibleRunner.get_runner(inventory)
    if name not in runner.get_hosts("all"):
        raise pytest.UsageError(
            f"host {name} is not in the inventory {inventory or '(ansible.cfg default)'}; "
            "pass --compliance-node <inventory name> and --ansible-inventory"
        )
    return name, runner.get_variables(name)


def _collect(host: testinfra.host.Host, config: pytest.Config) -> Node:
    inventory = config.option.ansible_inventory or "(ansible.cfg default inventory)"
    name, hostvars = _inventory_name(host, config)
    matrix = platform_matrix.load()
    variables = node_variables(name, hostvars, inventory)
    local = host.backend.NAME == "local"
    try:
        result = host.run(remote.command(probe_spec(variables, matrix, node_checks.FILES), with_nvml=not local))
    except RuntimeError as exc:  # testinfra's ssh backend raises with the CommandResult when ssh itself fails
        failed = exc.args[0] if exc.args else exc
        raise RuntimeError(f"{name}: cannot reach the node: {getattr(failed, 'stderr', failed)!s}".strip()) from None
    if result.rc != 0:
        raise RuntimeError(f"{name}: collecting the node's facts failed (exit {result.rc}): {result.stderr[-2000:]}")
    try:
        facts = json.loads(result.stdout)
    except ValueError as exc:
        raise RuntimeError(f"{name}: the node's facts are not JSON ({exc}): {result.stdout[:500]!r}") from exc
    if local:
        facts["gpu"] = gpu_health.probe.snapshot()  # in-process, through the venv's pynvml
    expected = resolve(name, variables, facts["os_release"].get("ID", ""), matrix, inventory)
    return Node(name, facts, expected)


@pytest.fixture
def node(host: testinfra.host.Host, request: pytest.FixtureRequest) -> Node:
    """One node's facts and expectation, collected once per node for the whole session."""
    cache = request.config.stash[NODES]
    key = host.backend.get_pytest_id()
    if key not in cache:
        try:
            cache[key] = _collect(host, request.config)
        except Exception as exc:  # any failure to reach or read the node: every check of it errors with it
            cache[key] = exc
    collected = cache[key]
    if isinstance(collected, Exception):
        raise RuntimeError(str(collected)) from None
    return collected


@pytest.fixture
def verdict(request: pytest.FixtureRequest) -> Callable[[Outcome], None]:
    """Turn an Outcome into the test's result; the message goes into the report either way."""

    def judge(outcome: Outcome) -> None:
        request.node.user_properties.append(("message", outcome.message))
        if outcome.status == "skip":
            pytest.skip(outcome.message)
        if outcome.status == "fail":
            pytest.fail(outcome.message, pytrace=False)

    return judge


def _check_name(item: pytest.Item) -> str:
    name = getattr(item, "originalname", item.name).removeprefix("test_")
    params = getattr(getattr(item, "callspec", None), "params", {})
    return f"{name}.{params['check']}" if "check" in params else name


def _node_name(item: pytest.Item) -> str:
    """The inventory name once the node is known, testinfra's host name before (a failed collection)."""
    collected = getattr(item, "funcargs", {}).get("node")
    if isinstance(collected, Node):
        return collected.name
    params = getattr(getattr(item, "callspec", None), "params", {})
    host = params.get("_testinfra_host")
    return host.backend.get_pytest_id().split("://", 1)[-1] if host is not None else "?"


def _message(report_: pytest.TestReport) -> str:
    recorded = dict(report_.user_properties).get("message")
    if recorded:
        return str(recorded)
    if report_.skipped and isinstance(report_.longrepr, tuple):
        return str(report_.longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(getattr(report_.longrepr, "reprcrash", None), "message", None)
    if crash:
        return str(crash)
    text = report_.longreprtext.strip().splitlines()
    return text[-1] if text else ""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    made: pytest.TestReport = yield
    outcome = None
    if made.when == "call":
        outcome = {"passed": "pass", "failed": "fail", "skipped": "skip"}[made.outcome]
    elif made.when == "setup" and not made.passed:
        outcome = "skip" if made.skipped else "error"
    if outcome is not None:
        item.config.stash[ROWS].append(report.Row(_node_name(item), _check_name(item), outcome, _message(made)))
    return made


def pytest_sessionfinish(session: pytest.Session) -> None:
    rows = session.config.stash[ROWS]
    if not rows:
        return
    meta = {
        "inventory": session.config.option.ansible_inventory or "(ansible.cfg default)",
        "hosts": session.config.option.hosts or "",
        "generated": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    directory = Path(session.config.option.compliance_report_dir)
    session.config.stash[REPORT_PATHS] = report.write(rows, directory, meta)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    rows = config.stash[ROWS]
    if not rows:
        return
    terminalreporter.section("node compliance")
    for line in report.summary_lines(rows):
        terminalreporter.write_line(line)
    if REPORT_PATHS in config.stash:
        json_path, md_path = config.stash[REPORT_PATHS]
        terminalreporter.write_line(f"report: {json_path} and {md_path}")
