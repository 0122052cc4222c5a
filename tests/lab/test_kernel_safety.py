"""Kernel safety on a real lab VM: nouveau blacklisted, reboots only where allowed, no kernel without headers.

The session's first install (conftest) blacklists nouveau and rebuilds the initramfs; run with
reboots not allowed it fails naming `nvidia_driver_reboot_allowed`, run as the lab inventory
says (reboots allowed) it reboots the node and converges. Here: the blacklist is in the
rebuilt initramfs; those two runs; the kernel flavour's metapackage is held; and apt refuses
a second kernel whose headers are not installed with it, before dpkg changes anything. The lab
has no GPU, so the DKMS build for every installed kernel never runs here (see
roles/nvidia_driver/README.md).
"""

from __future__ import annotations

import pytest

from tests.lab.conftest import LabNode
from tests.lab.play_report import PlayReport, assert_succeeded

pytestmark = pytest.mark.lab

BLACKLIST = "/etc/modprobe.d/blacklist-nouveau.conf"
REBOOT = "nvidia_driver : Reboot onto the new kernel modules"


def _boot_id(node: LabNode) -> str:
    return node.run("cat /proc/sys/kernel/random/boot_id").stdout.strip()


def test_the_first_install_blacklists_nouveau_in_the_initramfs(lab_node: LabNode) -> None:
    predicted = PlayReport.parse(lab_node.run_of("check")).changed
    assert "nvidia_driver : Blacklist nouveau and disable its modesetting" in predicted
    lines = lab_node.run(f"cat {BLACKLIST}").stdout.splitlines()
    assert lines[-2:] == ["blacklist nouveau", "options nouveau modeset=0"]
    # The lab boots its own kernel and initrd (direct kernel boot); the node's initramfs is
    # what a real node would boot, so it is read here.
    initramfs = lab_node.run("lsinitramfs /boot/initrd.img-$(uname -r)").stdout.split()
    assert "etc/modprobe.d/blacklist-nouveau.conf" in initramfs, "the blacklist is not in the initramfs"


def test_a_first_install_fails_where_reboots_are_not_allowed_and_reboots_where_they_are(lab_node: LabNode) -> None:
    refused = PlayReport.parse(lab_node.run_of("refused"))
    assert [f.task for f in refused.failed] == ["nvidia_driver : Refuse to leave the node on stale kernel modules"]
    message = refused.failed[0].message
    assert "nvidia_driver_reboot_allowed is false" in message and "nouveau blacklisted" in message, message
    assert REBOOT not in refused.changed

    # ansible.builtin.reboot reports changed only once the node is back with a new boot_id.
    converge = assert_succeeded(lab_node.run_of("converge"))
    assert REBOOT in converge.changed, "the first install did not reboot the node"
    assert lab_node.run("test -e /run/nvidia-driver-reboot-required", check=False).returncode == 1


def test_a_kernel_without_its_headers_is_refused_and_the_flavour_is_held(lab_node: LabNode) -> None:
    flavour = lab_node.run("uname -r").stdout.strip().split("-", 2)[2]
    assert f"linux-image-{flavour}" in lab_node.run("apt-mark showhold").stdout.split()
    lab_node.run("apt-get update -qq", timeout=600)
    # A second kernel of another flavour: the generic image that linux-image-amd64 depends on.
    depends = lab_node.run("apt-cache depends linux-image-amd64").stdout
    second = next(line.split()[-1] for line in depends.splitlines() if "Depends: linux-image-" in line)
    release = second.removeprefix("linux-image-")
    attempt = lab_node.run(f"DEBIAN_FRONTEND=noninteractive apt-get install -y {second}", check=False, timeout=900)
    assert attempt.returncode != 0, f"apt installed {second} without its headers:\n{attempt.stdout[-2000:]}"
    assert f"refusing kernel {release}: linux-headers-{release} is neither installed" in attempt.stderr, attempt.stderr
    status = lab_node.run(f"dpkg-query -W -f='${{db:Status-Status}}' {second}", check=False).stdout
    assert status in ("", "not-installed"), f"{second} is {status!r} after the refusal"
    assert lab_node.run("ls /lib/modules").stdout.split() == [lab_node.run("uname -r").stdout.strip()]
