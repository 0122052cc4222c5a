"""serving.gateway as a local process in front of a lab Triton, on a free loopback port;
`with GatewayProcess(triton.grpc_url, run_dir) as gateway:` stops it on exit."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from model_repo_check.tritonserver.processes import LOOPBACK, ServerProcess, free_port
from model_repo_check.tritonserver.server import REPO


class GatewayProcess(ServerProcess):
    name = "serving.gateway"

    def __init__(
        self, triton_grpc: str, run_dir: Path, extra_args: Sequence[str] = (), port: int | None = None
    ) -> None:
        self.triton_grpc = triton_grpc
        self.run_dir = Path(run_dir)
        self.extra_args = list(extra_args)
        self.fixed_port = port  # chosen beforehand, so that a lab's Prometheus scrapes it from the start
        self.port: int | None = port
        super().__init__(self.run_dir / "gateway.log")

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("the gateway has no port yet: start() chooses it")
        return f"http://{LOOPBACK}:{self.port}"

    def command(self) -> list[str]:
        return [
            sys.executable,
            *("-m", "serving.gateway"),
            *("--triton-grpc", self.triton_grpc, "--host", LOOPBACK, "--port", str(self.port)),
            *("--model-repository", str(REPO / "model_repository")),
            *self.extra_args,
        ]

    def start(self, timeout: float = 60) -> None:
        """Start (on a free port unless one was given) and wait until /readyz answers 200 (Triton
        and every model ready)."""
        self.port = self.fixed_port or free_port()
        env = {**os.environ, "PYTHONPATH": str(REPO)}  # `-m serving.gateway` from any working directory
        self._launch(self.command(), env, f"{self.url}/readyz", timeout)
