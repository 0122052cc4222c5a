"""playbooks/upgrade_driver.yml on the lab: move to another driver build and back to the matrix pin.

The upgrade runs its steps in order (preflight, at-pin check, drain, change, reboot when the
module changed, CDI, verify, wait for the GPUs, uncordon), reporting the Kubernetes and GPU
steps as skipped on a lab node without a kubeconfig or GPU. While the node runs the other
build, the compliance suite fails the driver checks and site.yml refuses to put the pin back
(a live driver is changed only by the upgrade playbook). Back at the pin, the upgrade
playbook skips the node without draining it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from platform_matrix import load
from tests.lab.compliance_run import assert_clean, compliance
from tests.lab.conftest import LabNode
from tests.lab.play_report import PlayReport, assert_succeeded

pytestmark = pytest.mark.lab

SOURCE = load().driver_source("debian-nonfree")
# The upgrade's steps, in the order they must run, with what each does on a lab node.
ORDER = [
    ("preflight : Stop before any change when the node is not fit", "skipped"),
    ("Skip the node, already at the pin", "skipped"),
    ("Cordon and drain the node", "skipped"),
    ("Report the skipped drain", "ok"),
    ("nvidia_driver : Install the userspace packages at the pinned version", "changed"),
    ("nvidia_driver : Reboot onto the new kernel modules", "skipped"),
    ("Report the skipped CDI spec", "ok"),
    ("Verify the pinned packages are installed", "ok"),
    ("Report the skipped GPU wait", "ok"),
    ("Uncordon the node", "skipped"),
    ("Report the skipped uncordon", "ok"),
]


def _order(report: PlayReport) -> list[tuple[str, str]]:
    names = {name for name, _ in ORDER}
    return [(step.task, step.outcome) for step in report.steps if step.task in names]


def test_rolling_upgrade_to_another_build_and_back(lab_node: LabNode, tmp_path: Path) -> None:
    pinned = SOURCE["package_version"]
    first = SOURCE["userspace_packages"][0]
    offered = lab_node.run(f"apt-get update -qq && apt-cache madison {first} | awk '{{print $3}}'").stdout.split()
    target = next(v for v in offered if v != pinned)  # madison lists the newest first
    extra = {"nvidia_driver_version": target.split("-")[0], "nvidia_driver_package_version": target}

    upgrade = assert_succeeded(lab_node.playbook("playbooks/upgrade_driver.yml", "-e", json.dumps(extra)))
    assert _order(upgrade) == ORDER, "the upgrade's steps ran out of order or did something else"
    messages = {step.task: step.message for step in upgrade.steps}
    assert "is not cordoned or drained" in messages["Report the skipped drain"]
    installed = lab_node.packages()
    for package in SOURCE["userspace_packages"]:
        assert installed[package] == (target, "hold"), f"{package}: {installed[package]}"
    assert f"Pin: version {target}" in lab_node.run("cat /etc/apt/preferences.d/nvidia-driver.pref").stdout

    # The node now runs a build the inventory and the matrix do not pin: compliance must say so.
    code, rows = compliance(lab_node, tmp_path / "other-build")
    assert code == 1
    assert rows["driver_packages"].status == "fail"
    for package in SOURCE["userspace_packages"]:
        assert f"{package} is at {target}" in rows["driver_packages"].message
    assert rows["driver_packages"].message.endswith(
        f"the pin (nvidia_driver_package_version, debian-nonfree) is {pinned}"
    )
    assert rows["apt_pin"].status == "fail" and f"does not pin version {pinned}" in rows["apt_pin"].message

    # site.yml does not swap a live driver, and changes nothing while refusing.
    refused = PlayReport.parse(lab_node.playbook("playbooks/site.yml"))
    assert not refused.succeeded
    refusal = "nvidia_driver : Refuse to replace an installed driver of another version"
    assert [f.task for f in refused.failed] == [refusal]
    assert "run playbooks/upgrade_driver.yml" in refused.failed[0].message
    assert refused.host_stats()["changed"] == 0, f"a refused run changed {refused.changed}"
    assert lab_node.packages()[first] == (target, "hold")

    back = assert_succeeded(lab_node.playbook("playbooks/upgrade_driver.yml"))
    assert "nvidia_driver : Install the userspace packages at the pinned version" in back.changed
    installed = lab_node.packages()
    for package in SOURCE["userspace_packages"]:
        assert installed[package] == (pinned, "hold"), f"{package} after returning to the pin: {installed[package]}"

    # At the pin: the node is skipped before any drain.
    again = assert_succeeded(lab_node.playbook("playbooks/upgrade_driver.yml"))
    ran = [step.task for step in again.steps if step.outcome != "skipped"]
    assert "Skip the node, already at the pin" in ran
    assert "Report the skipped drain" not in ran and "Cordon and drain the node" not in [s.task for s in again.steps]
    assert again.host_stats()["changed"] == 0, f"an upgrade at the pin changed {again.changed}"
    assert_clean(lab_node, tmp_path / "back")
