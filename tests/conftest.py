"""Fixtures for every test folder."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lab_fleet.processes import sigterm_interrupts


@pytest.fixture(scope="session", autouse=True)
def _sigterm_runs_teardown() -> Iterator[None]:
    """A SIGTERM (a CI timeout, `kill`) interrupts the run like Ctrl-C, so every fixture's
    teardown still stops what it started: tritonserver, Prometheus, Alertmanager, qemu."""
    with sigterm_interrupts():
        yield
