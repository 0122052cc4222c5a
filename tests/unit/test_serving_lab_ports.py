"""The serving lab's retry of a server start whose port was taken between free_port() and the
bind (lab_fleet/serving.py: start_on_free_ports), on a real server process: Python's http.server,
which like the lab's servers exits saying "Address already in use"."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab_fleet.serving import PORT_ATTEMPTS, port_taken, start_on_free_ports
from model_repo_check.tritonserver.processes import LOOPBACK, ServerError, ServerProcess, free_port
from tests.ports import taken_port


class HttpServer(ServerProcess):
    """http.server on the next port of `ports`, one per start."""

    name = "http.server"

    def __init__(self, log: Path, ports: Iterator[int], argv: list[str] | None = None) -> None:
        super().__init__(log)
        self.ports = ports
        self.argv = argv
        self.started: list[int] = []

    def start(self, timeout: float = 30) -> None:
        port = next(self.ports)
        self.started.append(port)
        argv = self.argv or [sys.executable, "-m", "http.server", "--bind", LOOPBACK, str(port)]
        self._launch(argv, {}, f"http://{LOOPBACK}:{port}/", timeout)


def test_a_start_on_a_taken_port_is_retried_on_the_next(tmp_path: Path) -> None:
    with taken_port() as taken:
        server = HttpServer(tmp_path / "server.log", iter([taken, free_port()]))
        try:
            assert start_on_free_ports(server.start, server.log) == 2
            assert server.running and server.started[0] == taken and server.started[1] != taken
        finally:
            server.stop()


def test_a_port_taken_at_every_attempt_fails_with_the_servers_reason(tmp_path: Path) -> None:
    with taken_port() as taken:
        server = HttpServer(tmp_path / "server.log", iter([taken] * PORT_ATTEMPTS))
        with pytest.raises(ServerError, match="exited") as caught:
            start_on_free_ports(server.start, server.log)
    assert "Address already in use" in str(caught.value)
    assert server.started == [taken] * PORT_ATTEMPTS and not server.running


def test_another_failure_is_not_retried(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "raise SystemExit('no model repository')"]
    server = HttpServer(tmp_path / "server.log", iter([free_port()] * PORT_ATTEMPTS), argv)
    with pytest.raises(ServerError, match="no model repository"):
        start_on_free_ports(server.start, server.log)
    assert len(server.started) == 1
    assert not port_taken(server.log)
