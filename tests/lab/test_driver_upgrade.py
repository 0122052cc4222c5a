"""playbooks/upgrade_driver.yml on the lab: move to another driver build and back to the matrix pin.

While the node runs the other build, the compliance suite must fail the driver checks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from platform_matrix import load
from tests.lab.compliance_run import assert_clean, compliance
from tests.lab.conftest import LabNode
from tests.lab.play_report import assert_succeeded

pytestmark = pytest.mark.lab

SOURCE = load().driver_source("debian-nonfree")


def test_rolling_upgrade_to_another_build_and_back(lab_node: LabNode, tmp_path: Path) -> None:
    pinned = SOURCE["package_version"]
    first = SOURCE["userspace_packages"][0]
    offered = lab_node.run(f"apt-get update -qq && apt-cache madison {first} | awk '{{print $3}}'").stdout.split()
    target = next(v for v in offered if v != pinned)  # madison lists the newest first
    extra = {"nvidia_driver_version": target.split("-")[0], "nvidia_driver_package_version": target}

    upgrade = lab_node.playbook("playbooks/upgrade_driver.yml", "-e", json.dumps(extra), json_output=False)
    assert upgrade.returncode == 0, upgrade.stdout[-5000:]
    assert "is not cordoned or drained" in upgrade.stdout, "the skipped Kubernetes steps were not reported"
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

    back = lab_node.playbook("playbooks/site.yml")
    assert_succeeded(back)
    installed = lab_node.packages()
    for package in SOURCE["userspace_packages"]:
        assert installed[package] == (pinned, "hold"), f"{package} after returning to the pin: {installed[package]}"
    assert_clean(lab_node, tmp_path / "back")
