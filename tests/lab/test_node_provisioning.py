"""site.yml on a real lab VM: check mode, convergence, idempotence, and the driver pin holding."""

from __future__ import annotations

import json

import pytest

from platform_matrix import load
from tests.lab.conftest import LabNode, changed_tasks, stats
from tests.lab.play_report import assert_succeeded

pytestmark = pytest.mark.lab

MATRIX = load()
SOURCE = MATRIX.driver_source("debian-nonfree")
PINNED = SOURCE["package_version"]
PACKAGES = SOURCE["userspace_packages"]


def _debian_version_key(node: LabNode, a: str, b: str) -> bool:
    return node.run(f"dpkg --compare-versions '{a}' gt '{b}'", check=False).returncode == 0


def test_check_mode_on_the_fresh_node_predicts_the_changes(lab_node: LabNode) -> None:
    check = lab_node.runs["check"]
    assert_succeeded(check)
    predicted = changed_tasks(check)
    for task in (
        "nvidia_driver : Enable the driver's apt source (debian-nonfree)",
        "nvidia_driver : Pin every NVIDIA package to the exact driver version",
        "nvidia_driver : Keep unattended-upgrades away from the driver",
        "nvidia_container_toolkit : Install containerd",
        "nvidia_container_toolkit : Write the containerd configuration (nvidia runtime, systemd cgroups, CDI)",
    ):
        assert task in predicted, f"check mode did not predict {task!r}; predicted: {predicted}"
    report = json.loads(check.stdout)
    diffs = [
        diff.get("after", "")
        for play in report["plays"]
        for task in play["tasks"]
        for host in task["hosts"].values()
        for diff in (host.get("diff") or [])
        if isinstance(diff, dict)
    ]
    assert any(f"Pin: version {PINNED}" in after for after in diffs), "the --diff output does not show the pin"
    assert "Would install " + " ".join(f"{p}={PINNED}" for p in PACKAGES) + " and hold them" in check.stdout


def test_site_converges_the_fresh_node(lab_node: LabNode) -> None:
    converge = lab_node.runs["converge"]
    assert stats(converge)["failures"] == 0
    assert stats(converge)["changed"] > 0, "the first run on a fresh node must change it"
    installed = lab_node.packages()
    for package in PACKAGES:
        assert installed[package] == (PINNED, "hold"), f"{package}: {installed.get(package)}"


def test_a_second_run_changes_nothing(lab_node: LabNode) -> None:
    again = lab_node.playbook("playbooks/site.yml")
    assert_succeeded(again)
    assert stats(again)["changed"] == 0, f"not idempotent, changed: {changed_tasks(again)}"


def test_a_second_run_changes_nothing_without_mitogen_either(lab_node: LabNode) -> None:
    """ansible.cfg runs Mitogen; ANSIBLE_STRATEGY=linear is the documented way back to stock Ansible."""
    again = lab_node.playbook("playbooks/site.yml", env={"ANSIBLE_STRATEGY": "linear"})
    assert_succeeded(again)
    assert stats(again)["changed"] == 0, f"not idempotent under linear, changed: {changed_tasks(again)}"


def test_the_pin_and_the_hold_survive_apt_get_upgrade(lab_node: LabNode) -> None:
    lab_node.run("apt-get update -qq", timeout=600)
    offered = lab_node.run(f"apt-cache madison {PACKAGES[0]} | awk '{{print $3}}'").stdout.split()
    newer = [v for v in offered if _debian_version_key(lab_node, v, PINNED)]
    assert newer, f"the archive offers nothing newer than {PINNED}; this test would prove nothing ({offered})"
    policy = lab_node.run(f"apt-cache policy {PACKAGES[0]}").stdout
    assert f"Candidate: {PINNED}" in policy, policy

    lab_node.run("DEBIAN_FRONTEND=noninteractive apt-get -y upgrade", timeout=1200)
    installed = lab_node.packages()
    for package in PACKAGES:
        assert installed[package] == (PINNED, "hold"), f"{package} after upgrade: {installed[package]}"

    # The preference alone also wins: without the hold, upgrade still keeps the pin.
    lab_node.run("apt-mark unhold " + " ".join(PACKAGES))
    try:
        lab_node.run("DEBIAN_FRONTEND=noninteractive apt-get -y upgrade", timeout=1200)
        installed = lab_node.packages()
        for package in PACKAGES:
            assert installed[package][0] == PINNED, f"{package} without hold: {installed[package]}"
    finally:
        lab_node.run("apt-mark hold " + " ".join(PACKAGES))
