"""serving.gateway as a local process in front of a lab Triton, on a free loopback port;
`with GatewayProcess(triton.grpc_url, run_dir) as gateway:` stops it on exit."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from lab_fleet.processes import LOOPBACK, free_port, spawn, stop_group, wait_ready
from lab_fleet.triton import REPO


class GatewayProcess:
    def __init__(self, triton_grpc: str, run_dir: Path, extra_args: Sequence[str] = ()) -> None:
        self.triton_grpc = triton_grpc
        self.run_dir = Path(run_dir)
        self.extra_args = list(extra_args)
        self.log = self.run_dir / "gateway.log"
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("the gateway has no port yet: start() chooses it")
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def command(self) -> list[str]:
        return [
            sys.executable,
            *("-m", "serving.gateway"),
            *("--triton-grpc", self.triton_grpc, "--host", LOOPBACK, "--port", str(self.port)),
            *("--model-repository", str(REPO / "model_repository")),
            *self.extra_args,
        ]

    def start(self, timeout: float = 60) -> None:
        """Start on a free port and wait until /readyz answers 200 (Triton and every model ready)."""
        self.stop()
        self.port = free_port()
        env = {**os.environ, "PYTHONPATH": str(REPO)}  # `-m serving.gateway` from any working directory
        self._proc = spawn(self.command(), self.log, env)
        try:
            wait_ready(f"{self.url}/readyz", timeout, "serving.gateway", self._proc, self.log)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        stop_group(proc.pid)
        proc.wait()

    def __enter__(self) -> GatewayProcess:
        if self._proc is None:
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
