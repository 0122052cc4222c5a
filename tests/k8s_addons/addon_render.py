"""Render the GPU add-ons with the real playbook and read the manifests back."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = REPO_ROOT / ".venv" / "bin"
PLAYBOOK = REPO_ROOT / "playbooks" / "k8s_addons.yml"
# Every inventory, as `make render-addons` renders them (the examples: lab, staging, prod).
ENVIRONMENTS = tuple(sorted(path.name for path in (REPO_ROOT / "inventories").iterdir() if path.is_dir()))
WORKLOAD_KINDS = {"DaemonSet", "Deployment", "StatefulSet", "Job"}


def ansible_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["ANSIBLE_CONFIG"] = str(REPO_ROOT / "ansible.cfg")
    env["ANSIBLE_NOCOLOR"] = "1"
    env["ANSIBLE_FORCE_COLOR"] = "0"
    return env


def run_playbook(inventory: str, extra_vars: Mapping[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    """ansible-playbook playbooks/k8s_addons.yml -i inventories/<inventory> -e <extra_vars> <args>."""
    command = [
        str(VENV_BIN / "ansible-playbook"),
        str(PLAYBOOK),
        "-i",
        str(REPO_ROOT / "inventories" / inventory),
        "-e",
        json.dumps(dict(extra_vars)),
        *args,
    ]
    return subprocess.run(command, cwd=REPO_ROOT, env=ansible_env(), capture_output=True, text=True, check=False)


def render(
    inventory: str, out_dir: Path, extra_vars: Mapping[str, Any] | None = None
) -> subprocess.CompletedProcess[str]:
    """Render into `out_dir`; the result carries the playbook's output for failure messages."""
    variables = {"k8s_addons_render_dir": str(out_dir), **(extra_vars or {})}
    return run_playbook(inventory, variables)


def load_manifests(directory: Path) -> dict[str, list[dict[str, Any]]]:
    """Every YAML file of `directory` (by name) with its documents."""
    manifests = {}
    for path in sorted(directory.glob("*.yaml")):
        with path.open(encoding="utf-8") as handle:
            manifests[path.name] = [doc for doc in yaml.safe_load_all(handle) if doc is not None]
    return manifests


def objects(manifests: Mapping[str, list[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    for docs in manifests.values():
        yield from docs


def find(manifests: Mapping[str, list[dict[str, Any]]], kind: str, name: str) -> dict[str, Any]:
    matches = [obj for obj in objects(manifests) if obj["kind"] == kind and obj["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def workloads(manifests: Mapping[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [obj for obj in objects(manifests) if obj["kind"] in WORKLOAD_KINDS]


def containers(workload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Init containers and containers of a workload's pod template."""
    pod = workload["spec"]["template"]["spec"]
    return [*pod.get("initContainers", []), *pod["containers"]]
