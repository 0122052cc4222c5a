"""Recorded NVML values and recorded node facts, and the expectations of real inventories."""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from testinfra.utils.ansible_runner import AnsibleRunner

import platform_matrix
from tests.compliance.expectations import NodeExpectation, node_variables, resolve

HERE = Path(__file__).parent
REPO = HERE.parents[2]


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture
def nvml_record() -> Callable[[str], dict[str, Any]]:
    """A recorded NVML snapshot (tests/unit/compliance/nvml_records/<name>.json), fresh per call."""
    return lambda name: _json(HERE / "nvml_records" / f"{name}.json")


@pytest.fixture
def dcgm_report() -> Callable[..., dict[str, Any]]:
    """dcgm_diag of a snapshot whose dcgmi printed tests/unit/compliance/dcgm_records/<name>.json."""

    def diag(name: str, rc: int = 0) -> dict[str, Any]:
        stdout = (HERE / "dcgm_records" / f"{name}.json").read_text(encoding="utf-8")
        return {"command": "dcgmi diag -r 1 -j", "rc": rc, "stdout": stdout, "stderr": ""}

    return diag


@pytest.fixture
def lab_facts() -> dict[str, Any]:
    """node_facts.collect() as read from a lab node converged by site.yml (no GPU, NVML driver not loaded)."""
    return copy.deepcopy(_json(HERE / "node_records" / "lab_node_converged.json"))


@pytest.fixture(scope="session")
def matrix() -> platform_matrix.Matrix:
    return platform_matrix.load()


@pytest.fixture(scope="session")
def inventories(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The committed inventories; lab's hosts.yml is written by scripts/lab, so a copy gets one lab host."""
    lab = tmp_path_factory.mktemp("inventory") / "lab"
    shutil.copytree(REPO / "inventories/lab/group_vars", lab / "group_vars")
    (lab / "hosts.yml").write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        lab-node-1:\n")
    with pytest.MonkeyPatch.context() as patch:
        # testinfra's AnsibleRunner runs ansible-inventory: the one beside this interpreter.
        patch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        patch.setenv("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))
        yield {"lab": lab, "prod": REPO / "inventories/prod", "staging": REPO / "inventories/staging"}


@pytest.fixture(scope="session")
def inventory_host(inventories) -> Callable[[str, str], dict[str, Any]]:
    """(inventory, host) -> the host's variables as ansible-inventory merges them."""

    def hostvars(inventory: str, host: str) -> dict[str, Any]:
        return dict(AnsibleRunner.get_runner(str(inventories[inventory])).get_variables(host))

    return hostvars


@pytest.fixture(scope="session")
def expect(matrix, inventory_host) -> Callable[..., NodeExpectation]:
    """expect("prod", "gpu-p01.prod.example.com", os_id="debian", **overrides) -> NodeExpectation."""

    def build(inventory: str, host: str, os_id: str = "debian", **overrides: Any) -> NodeExpectation:
        hostvars = {**inventory_host(inventory, host), **overrides}
        return resolve(host, node_variables(host, hostvars, inventory), os_id, matrix, inventory)

    return build
