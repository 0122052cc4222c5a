"""Render every inventory once per test session, with the real playbook."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.k8s_addons.addon_render import ENVIRONMENTS, load_manifests, render


@pytest.fixture(scope="session")
def rendered_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    dirs = {}
    for env in ENVIRONMENTS:
        out = tmp_path_factory.mktemp(f"addons-{env}")
        result = render(env, out)
        assert result.returncode == 0, f"render of inventories/{env} failed:\n{result.stdout}\n{result.stderr}"
        dirs[env] = out
    return dirs


@pytest.fixture(scope="session")
def rendered(rendered_dirs: dict[str, Path]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    return {env: load_manifests(path) for env, path in rendered_dirs.items()}
