"""Fault test: the node loses power while the driver role runs dpkg; after a boot, a re-run converges."""

from __future__ import annotations

import subprocess
import time

import pytest

from platform_matrix import load
from tests.lab.conftest import REPO, LabNode, stats
from tests.lab.play_report import assert_succeeded

pytestmark = pytest.mark.lab

SOURCE = load().driver_source("debian-nonfree")
INSTALL_TASK = "TASK [nvidia_driver : Install the userspace packages at the pinned version]"


def test_power_loss_during_the_driver_install_then_a_rerun_converges(lab_node: LabNode) -> None:
    packages = " ".join(SOURCE["userspace_packages"])
    # The driver's own packages go; their dependencies stay (the fresh-node proofs install those),
    # so the re-install that the power cut interrupts is the driver's dpkg run and little else.
    purge = f"apt-mark unhold {packages} && DEBIAN_FRONTEND=noninteractive apt-get -y purge {packages}"
    lab_node.run(purge, timeout=900)
    play = subprocess.Popen(
        ["ansible-playbook", "-i", str(lab_node.inventory.parent), "playbooks/site.yml"],
        cwd=REPO,
        env=lab_node.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert play.stdout is not None
    for line in play.stdout:
        if line.startswith(INSTALL_TASK):
            break
    else:
        pytest.fail(f"site.yml ended before the driver install (exit {play.wait()})")
    deadline = time.monotonic() + 300
    while lab_node.run("pgrep -x dpkg", check=False).returncode != 0:
        assert time.monotonic() < deadline, "dpkg never started during the install task"
        time.sleep(0.5)
    time.sleep(2)  # let dpkg get into unpacking
    lab_node.lab.poweroff(lab_node.name)
    play.stdout.read()
    assert play.wait() != 0, "the play survived a power loss"

    lab_node.lab.up(count=1, memory_mb=1536, cpus=2, timeout=600)
    # The cut must have landed inside dpkg's transaction, or the re-run proves nothing about recovery:
    # dpkg --audit lists the packages left unpacked or half-configured, and apt refuses to go on until
    # `dpkg --configure -a` (which the role runs first) has finished them.
    audit = lab_node.run("dpkg --audit", check=False).stdout.strip()
    pending = lab_node.run("ls -A /var/lib/dpkg/updates", check=False).stdout.split()
    assert audit or pending, "the power cut did not interrupt dpkg: no package is left half-installed"
    rerun = lab_node.playbook("playbooks/site.yml")
    recovered = assert_succeeded(rerun)
    if audit:
        assert "nvidia_driver : Finish the interrupted dpkg run" in recovered.changed, audit
    assert stats(rerun)["failures"] == 0
    installed = lab_node.packages()
    for package in SOURCE["userspace_packages"]:
        assert installed[package] == (SOURCE["package_version"], "hold"), f"{package}: {installed.get(package)}"
