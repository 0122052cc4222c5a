"""Kernel safety on a real lab VM: nouveau blacklisted, reboots only where allowed, no kernel without headers.

The fresh node's first install (tests/lab/fresh_node.py, run where the converged image is made)
blacklists nouveau and rebuilds the initramfs; run with reboots not allowed it fails naming
`nvidia_driver_reboot_allowed`, run as the lab inventory says (reboots allowed) it reboots the
node and converges. Here: the blacklist is in the rebuilt initramfs of the converged node; those
two runs; the kernel flavour's metapackage is held; and apt refuses
a second kernel whose headers are not installed with it, before dpkg changes anything. The lab
has no GPU, so the DKMS build for every installed kernel never runs here (see
roles/nvidia_driver/README.md).
"""

from __future__ import annotations

import pytest

from tests.lab import fresh_node
from tests.lab.conftest import FreshProofs, LabNode

pytestmark = pytest.mark.lab

BLACKLIST = "/etc/modprobe.d/blacklist-nouveau.conf"


def _boot_id(node: LabNode) -> str:
    return node.run("cat /proc/sys/kernel/random/boot_id").stdout.strip()


def test_the_first_install_blacklists_nouveau_in_the_initramfs(lab_node: LabNode) -> None:
    lines = lab_node.run(f"cat {BLACKLIST}").stdout.splitlines()
    assert lines[-2:] == ["blacklist nouveau", "options nouveau modeset=0"]
    # The lab boots its own kernel and initrd (direct kernel boot); the node's initramfs is
    # what a real node would boot, so it is read here.
    initramfs = lab_node.run("lsinitramfs /boot/initrd.img-$(uname -r)").stdout.split()
    assert "etc/modprobe.d/blacklist-nouveau.conf" in initramfs, "the blacklist is not in the initramfs"


def test_a_first_install_fails_where_reboots_are_not_allowed_and_reboots_where_they_are(
    fresh_proofs: FreshProofs,
) -> None:
    fresh_node.judge_refused({"refused": fresh_proofs.run_of("refused")})
    fresh_node.judge_converge({"converge": fresh_proofs.run_of("converge")})


def test_a_node_booted_from_the_converged_image_owes_no_reboot(lab_node: LabNode) -> None:
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
