"""podman with the project's containers.conf (runc, no default ulimits: see containers.conf)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

CONTAINERS_CONF = Path(__file__).with_name("containers.conf")


class PodmanError(RuntimeError):
    pass


def podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def _argv(args: tuple[str, ...]) -> list[str]:
    if shutil.which("podman") is None:
        raise PodmanError("podman is not installed; run `make deps` (Debian packages podman, buildah, runc)")
    return ["podman", *args]


def podman(*args: str) -> str:
    """Run podman; its stdout, or PodmanError with its stderr."""
    result = subprocess.run(_argv(args), env=podman_env(), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise PodmanError(f"podman {' '.join(args)} failed (exit {result.returncode}):\n{result.stderr.strip()}")
    return result.stdout


def podman_ok(*args: str) -> bool:
    """True when podman exits 0 (a question such as `image exists`)."""
    return subprocess.run(_argv(args), env=podman_env(), capture_output=True, check=False).returncode == 0
