"""The fresh-node proofs: what site.yml must do on a node booted from the bare base image.

Four runs on one fresh node, in this order:
  "check"     --check --diff: predicts the install, the pin and the containerd changes
  "refused"   reboots not allowed (nvidia_driver_reboot_allowed=false): the first install needs a
              reboot (nouveau blacklisted), so it must fail naming the variable, without rebooting
  "converge"  as the lab inventory says (reboots allowed): reboots and converges
  "noop"      a second run: changes nothing
The conftest's `fresh_proofs` fixture makes the runs and keeps the node's disk as the converged
image (lab_fleet/converged.py) only when every judge below passes; the tests of
test_node_provisioning.py and test_kernel_safety.py report each judge on its own.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

from platform_matrix import load
from tests.lab.play_report import PlayReport, assert_succeeded

SOURCE = load().driver_source("debian-nonfree")
PINNED = SOURCE["package_version"]
PACKAGES = SOURCE["userspace_packages"]
DROP_IN_TASK = "nvidia_container_toolkit : Write the containerd drop-in with the nvidia runtime"
REBOOT = "nvidia_driver : Reboot onto the new kernel modules"
BLACKLIST_TASK = "nvidia_driver : Blacklist nouveau and disable its modesetting"
REFUSAL_TASK = "nvidia_driver : Refuse to leave the node on stale kernel modules"

Runs = dict[str, subprocess.CompletedProcess[str]]


def judge_check(runs: Runs) -> None:
    check = runs["check"]
    predicted = assert_succeeded(check, "site.yml --check --diff on the fresh node: ").changed
    for task in (
        "nvidia_driver : Enable the driver's apt source (debian-nonfree)",
        "nvidia_driver : Pin every NVIDIA package to the exact driver version",
        "nvidia_driver : Keep unattended-upgrades away from the driver",
        BLACKLIST_TASK,
        "nvidia_container_toolkit : Install containerd",
        DROP_IN_TASK,
        # containerd is not installed yet, so there is no config.toml to extend: check mode predicts one.
        "nvidia_container_toolkit : Write a main containerd configuration that imports the drop-in directory",
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


def judge_refused(runs: Runs) -> None:
    refused = PlayReport.parse(runs["refused"])
    assert [f.task for f in refused.failed] == [REFUSAL_TASK], refused.verdict()
    message = refused.failed[0].message
    assert "nvidia_driver_reboot_allowed is false" in message and "nouveau blacklisted" in message, message
    assert REBOOT not in refused.changed


def judge_converge(runs: Runs) -> None:
    # ansible.builtin.reboot reports changed only once the node is back with a new boot_id.
    converge = assert_succeeded(runs["converge"], "site.yml on the fresh node: ")
    assert converge.host_stats()["changed"] > 0, "the first run on a fresh node must change it"
    assert REBOOT in converge.changed, "the first install did not reboot the node"


def judge_noop(runs: Runs) -> None:
    again = assert_succeeded(runs["noop"], "the second site.yml run: ")
    assert again.host_stats()["changed"] == 0, f"not idempotent, changed: {list(again.changed)}"


JUDGES: dict[str, Callable[[Runs], None]] = {
    "check": judge_check,
    "refused": judge_refused,
    "converge": judge_converge,
    "noop": judge_noop,
}
