"""Fixtures of the serving lab suite: one lab (Triton, Prometheus, Alertmanager) per session on
the repository's model_repository, always torn down, and perf_analyzer load on demand."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator

import pytest

from lab_fleet.serving import ServingLab
from tests.serving_lab.clients import drive_load


@pytest.fixture(scope="session")
def serving_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServingLab]:
    lab = ServingLab(tmp_path_factory.mktemp("serving-lab"))
    try:
        lab.up()
        yield lab
    finally:
        lab.down()


@pytest.fixture(scope="session")
def load() -> Callable[..., subprocess.CompletedProcess[str]]:
    """`load(lab.triton, model, seconds, *perf_analyzer_args)`: see clients.drive_load."""
    return drive_load
