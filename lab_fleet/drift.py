"""serving.drift as a local process on loopback, reading a lab gateway's samples:
`with DriftAgentProcess(gateway.url, run_dir) as agent:` stops it on exit. The port can be
chosen before the start (`free_port()`), so that the lab's Prometheus is configured to scrape
it (`ServingLab(drift_target=...)`) before the gateway it reads from exists."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from lab_fleet.processes import LOOPBACK, free_port, spawn, stop_group, wait_ready
from lab_fleet.triton import REPO


class DriftAgentProcess:
    def __init__(
        self, gateway_url: str, run_dir: Path, extra_args: Sequence[str] = (), port: int | None = None
    ) -> None:
        self.gateway_url = gateway_url
        self.run_dir = Path(run_dir)
        self.extra_args = list(extra_args)
        self.port = port or free_port()
        self.log = self.run_dir / "drift-agent.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def target(self) -> str:
        """HOST:PORT, as Prometheus' static_configs want it."""
        return f"{LOOPBACK}:{self.port}"

    def command(self) -> list[str]:
        return [
            sys.executable,
            *("-m", "serving.drift"),
            *("--gateway", self.gateway_url, "--host", LOOPBACK, "--port", str(self.port)),
            *("--reference-dir", str(REPO / "model_repository")),
            *self.extra_args,
        ]

    def start(self, timeout: float = 60) -> None:
        """Start and wait until /livez answers (readiness needs the gateway: the caller waits for it)."""
        self.stop()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(REPO)}  # `-m serving.drift` from any working directory
        self._proc = spawn(self.command(), self.log, env)
        try:
            wait_ready(f"{self.url}/livez", timeout, "serving.drift", self._proc, self.log)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        stop_group(proc.pid)
        proc.wait()

    def __enter__(self) -> DriftAgentProcess:
        if self._proc is None:
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
