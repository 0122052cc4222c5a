"""scripts/lab itself: two nodes answer Ansible over strict SSH, down leaves no qemu, up reuses the image."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab_fleet.ansible_env import ansible_env
from lab_fleet.vm import qemu_processes
from tests.lab.conftest import REPO

pytestmark = pytest.mark.lab


def test_two_nodes_ping_then_down_leaves_no_qemu_and_up_reuses_the_image(tmp_path: Path) -> None:
    state = tmp_path / "state"
    inventory = tmp_path / "inventory"
    shutil.copytree(REPO / "inventories/lab/group_vars", inventory / "group_vars")
    env = ansible_env(tmp_path / "facts", LAB_STATE_DIR=str(state), LAB_INVENTORY=str(inventory / "hosts.yml"))

    def lab(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(REPO / "scripts/lab"), *args], env=env, capture_output=True, text=True, check=False
        )

    try:
        up = lab("up", "--nodes", "2", "--memory", "768", "--cpus", "1", "--timeout", "600")
        assert up.returncode == 0, up.stderr
        assert json.loads(up.stdout)["image_build_s"] == 0, "the image was rebuilt instead of reused"
        ping = subprocess.run(
            ["ansible", "-i", str(inventory), "all", "-m", "ansible.builtin.ping"],
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert ping.returncode == 0, ping.stdout + ping.stderr
        assert ping.stdout.count("SUCCESS") == 2, ping.stdout
        assert "StrictHostKeyChecking=no" not in (inventory / "hosts.yml").read_text()

        assert lab("down").returncode == 0
        assert qemu_processes(state) == [], "qemu processes left after down"
        status = lab("status", "--json")
        assert [row["running"] for row in json.loads(status.stdout)] == [False, False]

        again = lab("up", "--nodes", "1", "--memory", "768", "--cpus", "1", "--timeout", "600")
        assert again.returncode == 0, again.stderr
        timings = json.loads(again.stdout)
        assert timings["image_build_s"] == 0
        print(f"warm start of a stopped node: {timings['total_s']:.1f}s")
    finally:
        lab("destroy")
    assert qemu_processes(state) == []
