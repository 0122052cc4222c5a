"""The image's inputs (limiter/Containerfile's text and the assembled context, the repository's pins, checkov
clean), and the lab's reading of the rendered DaemonSet, which tests/lab/test_limiter_image.py runs the built
image with."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cgroup_limiter.config import parse_config

from serving.images.apps import APPS, requirement_lines
from serving.images.build import assemble
from tests.lab.limiter_lab import (
    CONTAINERD_DEFAULT_CAPS,
    PODS_MOUNT,
    REMOTE,
    TranslationError,
    ctr_run,
    lab_config,
    rendered,
)
from tests.limiter.conftest import LIMITER
from tests.tools import missing_tool

ROOT = LIMITER.parent
CONTAINERFILE = LIMITER / "Containerfile"
ENVIRONMENTS = sorted(path.name for path in (ROOT / "deploy/addons").iterdir() if path.is_dir())


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


def test_the_image_installs_exactly_the_pins_of_limiter_requirements():
    lines = requirement_lines(APPS["limiter"])
    assert {line.split("==")[0].lower(): line.split("==")[1] for line in lines} == pins(LIMITER / "requirements.txt")


def test_the_containerfile_text_starts_from_the_passed_base_and_the_context_holds_limiter_sources(tmp_path: Path):
    """The recipe's text and the assembled context (no image is built here; the lab builds one)."""
    text = CONTAINERFILE.read_text()
    assert APPS["limiter"].containerfile == CONTAINERFILE
    assert re.findall(r"^FROM\s+(\S+)", text, re.M) == ["${BASE_IMAGE}"]  # serving/images: container_base
    assert not (LIMITER / "Dockerfile").exists()
    assemble(APPS["limiter"], tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["Containerfile", "cgroup_limiter", "requirements.txt"]
    assert (tmp_path / "cgroup_limiter/__main__.py").is_file()
    assert not list(tmp_path.rglob("__pycache__"))


def test_checkov_passes_the_containerfile_with_written_reasons(tmp_path: Path):
    checkov = ROOT / ".venv-checkov/bin/checkov"
    if not checkov.exists():
        pytest.skip(missing_tool("checkov", "make .venv-checkov/.stamp"))
    # checkov's dockerfile framework reads files named Dockerfile only.
    scanned = tmp_path / "Dockerfile"
    shutil.copy(CONTAINERFILE, scanned)
    run = subprocess.run(
        [str(checkov), "-f", str(scanned), "--framework", "dockerfile", "-o", "json"],
        capture_output=True,
        text=True,
    )
    report = json.loads(run.stdout)
    assert report["results"]["failed_checks"] == []
    reasons = {c["check_id"]: c["check_result"]["suppress_comment"] for c in report["results"]["skipped_checks"]}
    assert set(reasons) <= {"CKV_DOCKER_3", "CKV_DOCKER_8", "CKV_DOCKER_7"}
    assert all("uid 0" in reasons[check] for check in {"CKV_DOCKER_3", "CKV_DOCKER_8"} & set(reasons))
    assert "pinned inputs" in reasons.get("CKV_DOCKER_7", "pinned inputs")


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_lab_runs_the_image_confined_as_the_rendered_daemonset(env: str):
    daemonset, config = rendered(ROOT / f"deploy/addons/{env}/30-cgroup-limiter.yaml")
    run = ctr_run(daemonset, "0", "lab-node-1", f"{REMOTE}/config")
    assert {flag.removeprefix("--cap-drop=") for flag in run.flags if flag.startswith("--cap-drop=")} == set(
        CONTAINERD_DEFAULT_CAPS
    )
    assert not [flag for flag in run.flags if flag.startswith(("--cap-add", "--privileged", "--allow-new-privs"))]
    assert {"--read-only", "--seccomp", "--env=NODE_NAME=lab-node-1"} <= set(run.flags)
    assert "--mount=type=bind,src=/sys/fs/cgroup,dst=/sys/fs/cgroup,options=rbind:rw" in run.flags
    assert f"--mount=type=bind,src={REMOTE}/config,dst=/etc/cgroup-limiter,options=rbind:ro" in run.flags
    assert run.command[:3] == ("python", "-m", "cgroup_limiter")
    assert run.command[-2:] == ("--pods-file", f"{PODS_MOUNT}/pods.json")
    # The lab's overrides are keys the agent accepts, on top of the rendered config.
    parsed = parse_config(lab_config(config), f"{env} config with the lab's overrides")
    assert parsed.adaptive.mode == "contention"
    assert parsed.metrics_address == "127.0.0.1"


def _as_user_1000(daemonset: dict) -> None:
    daemonset["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsUser"] = 1000


def _privileged(daemonset: dict) -> None:
    daemonset["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] = True


def _config_from_a_secret(daemonset: dict) -> None:
    volumes = daemonset["spec"]["template"]["spec"]["volumes"]
    volumes[:] = [{"name": v["name"], "secret": {"secretName": "x"}} if "configMap" in v else v for v in volumes]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_as_user_1000, "runAsUser 1000 differs from the image's USER 0"),
        (_privileged, "privileged"),
        (_config_from_a_secret, "volume config is neither hostPath, configMap nor emptyDir"),
    ],
)
def test_what_the_lab_cannot_reproduce_is_refused_by_name(change: Callable[[dict], None], message: str):
    daemonset = copy.deepcopy(rendered()[0])
    change(daemonset)
    with pytest.raises(TranslationError, match=message):
        ctr_run(daemonset, "0", "lab-node-1", f"{REMOTE}/config")
