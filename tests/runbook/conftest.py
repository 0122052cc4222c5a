"""Fixtures of the runbook's offline tests: the Kubernetes API stand-in (kube_api.py) on a loopback
port with a generated kubeconfig, always shut down."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from serving.runbook.cli import main
from tests.runbook.kube_api import KubeApi


@pytest.fixture
def kube_api() -> Iterator[KubeApi]:
    with KubeApi() as api:
        yield api


@pytest.fixture
def runbook(
    kube_api: KubeApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    """`runbook("promote", "--full")`: (exit status, stdout, stderr) of the CLI against kube_api."""
    kubeconfig = kube_api.kubeconfig(tmp_path / "kubeconfig")

    def run(*args: str) -> tuple[int, str, str]:
        code = main([*args, "--kubeconfig", str(kubeconfig)])
        out, err = capsys.readouterr()
        return code, out, err

    return run
