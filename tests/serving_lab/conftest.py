"""Fixtures of the serving lab suite: one lab (Triton, Prometheus, Alertmanager) per session on
the repository's model_repository, its gateway (started on demand, scraped from the start),
always torn down, and perf_analyzer load on demand."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator

import pytest

from lab_fleet.gateway import GatewayProcess
from lab_fleet.serving import ServingLab
from serving.tritonserver.processes import LOOPBACK, free_port
from tests.serving_lab.clients import drive_load


@pytest.fixture(scope="session")
def gateway_port() -> int:
    """The port of the session lab's gateway, known before the lab's Prometheus is configured."""
    return free_port()


@pytest.fixture(scope="session")
def serving_lab(tmp_path_factory: pytest.TempPathFactory, gateway_port: int) -> Iterator[ServingLab]:
    lab = ServingLab(tmp_path_factory.mktemp("serving-lab"), gateway_target=f"{LOOPBACK}:{gateway_port}")
    try:
        lab.up()
        yield lab
    finally:
        lab.down()


@pytest.fixture(scope="session")
def lab_gateway(
    serving_lab: ServingLab, gateway_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    """The gateway in front of the session lab's Triton, scraped by its Prometheus (job gateway)."""
    with GatewayProcess(serving_lab.triton.grpc_url, tmp_path_factory.mktemp("lab-gateway"), port=gateway_port) as gw:
        yield gw


@pytest.fixture(scope="session")
def load() -> Callable[..., subprocess.CompletedProcess[str]]:
    """`load(lab.triton, model, seconds, *perf_analyzer_args)`: see clients.drive_load."""
    return drive_load
