"""Fixtures of the runbook's offline tests: the Kubernetes API stand-in (kube_api.py) on a loopback
port with a generated kubeconfig, always shut down; and, for the desired-state commands, a git
repository of this working tree in a scratch folder, cloned for each test."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from serving.runbook.checkout import Checkout
from serving.runbook.cli import main
from tests.runbook.kube_api import KubeApi

REPO = Path(__file__).resolve().parents[2]


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


IDENTITY = {"user.name": "runbook test", "user.email": "runbook@example.com", "commit.gpgsign": "false"}


def git(repo: Path, *args: str) -> str:
    options = [part for key, value in IDENTITY.items() for part in ("-c", f"{key}={value}")]
    return subprocess.run(["git", *options, *args], cwd=repo, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="session")
def pristine_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository of this working tree's files (tracked and new, not ignored), each
    environment rendered from its stack file, in one commit."""
    root = tmp_path_factory.mktemp("pristine")
    files = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    listing = subprocess.run(files, cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, listing.decode().split("\0")):
        source = REPO / name
        if source.is_file() or source.is_symlink():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name, follow_symlinks=False)
    git(root, "init", "-q")
    for stack in sorted((root / "pulumi").glob("Pulumi.*.yaml")):
        Checkout(root, stack.name.split(".")[1]).render()
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "the working tree")
    return root


@pytest.fixture
def checkout_root(pristine_checkout: Path, tmp_path: Path) -> Path:
    """A clone of the pristine repository that commits as the test's identity."""
    root = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", str(pristine_checkout), str(root))
    for key, value in IDENTITY.items():
        git(root, "config", key, value)
    return root
