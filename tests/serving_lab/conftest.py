"""Fixtures of the serving lab suite: one lab (Triton, Prometheus, Alertmanager) per session on
the repository's model_repository, its gateway (started on demand, then scraped),
always torn down, and perf_analyzer load on demand; and the gate's schedule on two workers.

`make test-serving-lab` runs every serving_lab test (this folder, tests/model_repository,
tests/release) in one pytest run on two xdist workers with `--dist loadgroup`. Each module is
one unit of that schedule, so the servers its module fixtures start are started once, on one
worker. The modules that share the session lab, load the CPU (perf_analyzer, image builds,
thousands of model loads) or measure time (latency ratios, a probe period) form one serial unit
instead: one session lab, and never two of them at once. The other modules only wait on
servers of their own (scrapes, `for` durations, group_wait) and run beside it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lab_fleet.gateway import GatewayProcess
from lab_fleet.serving import ServingLab, start_on_free_ports
from model_repo_check.tritonserver.processes import LOOPBACK
from tests.serving_lab.clients import drive_load

SERIAL_GROUP = "serial"
# Modules in the serial unit besides those that use the session lab: they load the CPU or measure time.
SERIAL = {
    "tests/serving_lab/test_canary.py",  # P95 latency ratios of two tritonservers under load
    "tests/serving_lab/test_queue_policy.py",  # 64 requests at once against a queue of 2
    "tests/serving_lab/test_gateway_failures.py",  # overload at 200/s, readiness polled every 100 ms
    "tests/model_repository/test_triton_engine.py",  # the corpus loaded into tritonserver
    "tests/model_repository/test_differential.py",  # 2,500 generated configs loaded into tritonserver
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every serving_lab test without a group of its own gets its module's, or the serial one."""
    lab = [item for item in items if item.get_closest_marker("serving_lab")]
    shares_the_session_lab = {item.nodeid.split("::")[0] for item in lab if "serving_lab" in item.fixturenames}
    for item in lab:
        if item.get_closest_marker("xdist_group"):
            continue
        module = item.nodeid.split("::")[0]
        serial = module in SERIAL or module in shares_the_session_lab
        item.add_marker(pytest.mark.xdist_group(SERIAL_GROUP if serial else module))


@pytest.fixture(scope="session")
def serving_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServingLab]:
    lab = ServingLab(tmp_path_factory.mktemp("serving-lab"))
    try:
        lab.up()
        yield lab
    finally:
        lab.down()


@pytest.fixture(scope="session")
def lab_gateway(serving_lab: ServingLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """The gateway in front of the session lab's Triton (on a port chosen as it starts, again when
    that one was taken meanwhile), then scraped by the lab's Prometheus (job gateway)."""
    # A 10 s deadline instead of the default 1 s: this gateway carries the panels' traffic while
    # perf_analyzer loads the same Triton, which now gets the deadline itself and once answered a
    # request after 1 s (a 504); the deadline's own proof is test_gateway's.
    gateway = GatewayProcess(
        serving_lab.triton.grpc_url, tmp_path_factory.mktemp("lab-gateway"), ["--deadline-ms", "10000"]
    )
    start_on_free_ports(gateway.start, gateway.log)
    with gateway:
        serving_lab.scrape_gateway(f"{LOOPBACK}:{gateway.port}")
        yield gateway


@pytest.fixture(scope="session")
def load() -> Callable[..., subprocess.CompletedProcess[str]]:
    """`load(lab.triton, model, seconds, *perf_analyzer_args)`: see clients.drive_load."""
    return drive_load


@pytest.fixture
def start_gateway(tmp_path: Path) -> Iterator[Callable[..., GatewayProcess]]:
    """`start_gateway(triton_grpc, *args)`: one more gateway, stopped at the test's end."""
    started: list[GatewayProcess] = []

    def start(triton_grpc: str, *args: str) -> GatewayProcess:
        process = GatewayProcess(triton_grpc, tmp_path / f"gateway-{len(started)}", args)
        started.append(process)
        process.start()
        return process

    try:
        yield start
    finally:
        for process in started:
            process.stop()
