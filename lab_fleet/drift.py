"""serving.drift as a local process on loopback, reading a lab gateway's samples:
`with DriftAgentProcess(gateway.url, run_dir) as agent:` stops it on exit. The port can be
chosen before the start (`free_port()`), so that the lab's Prometheus is configured to scrape
it (`ServingLab(drift_target=...)`) before the gateway it reads from exists."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from model_repo_check.tritonserver.processes import LOOPBACK, ServerProcess, free_port
from model_repo_check.tritonserver.server import REPO


class DriftAgentProcess(ServerProcess):
    name = "serving.drift"

    def __init__(
        self, gateway_url: str, run_dir: Path, extra_args: Sequence[str] = (), port: int | None = None
    ) -> None:
        self.gateway_url = gateway_url
        self.run_dir = Path(run_dir)
        self.extra_args = list(extra_args)
        self.port = port or free_port()
        super().__init__(self.run_dir / "drift-agent.log")

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
        env = {**os.environ, "PYTHONPATH": str(REPO)}  # `-m serving.drift` from any working directory
        self._launch(self.command(), env, f"{self.url}/livez", timeout)
