"""Fixtures for every test folder."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from model_repo_check.tritonserver.processes import sigterm_interrupts
from tests.tools import MISSING_TOOL


@pytest.fixture(scope="session", autouse=True)
def _sigterm_runs_teardown() -> Iterator[None]:
    """A SIGTERM (a CI timeout, `kill`) interrupts the run like Ctrl-C, so every fixture's
    teardown still stops what it started: tritonserver, Prometheus, Alertmanager, qemu."""
    with sigterm_interrupts():
        yield


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--reverse",
        action="store_true",
        help="run the selected tests last first (no test may rely on another's leftovers)",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--reverse: the last test first. Module- and session-scoped fixtures still set up once per module."""
    if config.getoption("--reverse"):
        items.reverse()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """Under CI=true a test skipped for a missing tool (tests/tools.py) fails instead."""
    report = yield
    if report.skipped and os.environ.get("CI") == "true":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if MISSING_TOOL in reason:
            report.outcome = "failed"
            report.longrepr = f"CI=true and {reason.removeprefix('Skipped: ')}: `make deps` installs it"
    return report
