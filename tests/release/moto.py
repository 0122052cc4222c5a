"""moto's S3 server (from .venv-s3) on a loopback port, for the tests that publish a release."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from model_repo_check.tritonserver.processes import LOOPBACK, free_port, spawn, stop_group, wait_ready
from tests.release.conftest import ROOT

MOTO_SERVER = ROOT / ".venv-s3" / "bin" / "moto_server"
# What the tests' clients and the tools under test present to it (moto accepts any).
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}


@contextmanager
def moto_s3(log_dir: Path) -> Iterator[str]:
    """Its endpoint URL once it answers; stopped whatever the caller does."""
    if not MOTO_SERVER.exists():
        pytest.fail(f"{MOTO_SERVER} is missing: make .venv-s3/.stamp (requirements-s3.txt)")
    port = free_port()
    log = log_dir / "moto.log"
    proc = spawn([str(MOTO_SERVER), "-H", LOOPBACK, "-p", str(port)], log)
    try:
        endpoint = f"http://{LOOPBACK}:{port}"
        wait_ready(f"{endpoint}/moto-api/", 30, "moto_server", proc, log)
        yield endpoint
    finally:
        stop_group(proc.pid)
        proc.wait()
