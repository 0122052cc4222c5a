"""The image's inputs: pinned base, the same dependency pins as the repository, checkov clean."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.limiter.conftest import LIMITER

ROOT = LIMITER.parent


def pins(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\[\]-]+)==(\S+)", line)
        if match:
            found[match.group(1).lower()] = match.group(2)
    return found


def test_runtime_dependencies_are_the_repository_pins():
    ours, repository = pins(LIMITER / "requirements.txt"), pins(ROOT / "requirements.txt")
    assert set(ours) == {"prometheus-client", "pyyaml", "kubernetes"}
    assert {name: repository.get(name) for name in ours} == ours


def test_base_image_is_pinned_to_a_full_python_tag():
    (base,) = re.findall(r"^FROM\s+(\S+)", (LIMITER / "Dockerfile").read_text(), re.M)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", base), base


def test_image_runs_the_documented_module_and_port():
    text = (LIMITER / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["python", "-m", "cgroup_limiter"]' in text
    assert 'CMD ["--config", "/etc/cgroup-limiter/config.yaml"]' in text
    assert "EXPOSE 9500" in text


def test_checkov_passes_the_dockerfile_with_written_reasons():
    checkov = ROOT / ".venv-checkov/bin/checkov"
    if not checkov.exists():
        pytest.skip("make .venv-checkov/.stamp builds checkov")
    run = subprocess.run(
        [str(checkov), "-f", str(LIMITER / "Dockerfile"), "--framework", "dockerfile", "-o", "json"],
        capture_output=True,
        text=True,
    )
    report = json.loads(run.stdout)
    assert report["results"]["failed_checks"] == []
    skipped = report["results"]["skipped_checks"]
    assert {c["check_id"] for c in skipped} <= {"CKV_DOCKER_3", "CKV_DOCKER_8"}
    assert all("uid 0" in c["check_result"]["suppress_comment"] for c in skipped)
