"""The lab's Debian 12 VM image: debootstrap, a little guest configuration, mkfs.ext4 -d.

The image is cached under the cache directory, keyed by a hash of everything that goes into
it (suite, mirror, package list and the guest files below), so a second `lab up` reuses it
and a change to any input builds a new one.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from serving.images.debian_mirrors import mirrors

SUITE = "bookworm"
PACKAGES = (
    "linux-image-cloud-amd64",
    "systemd-sysv",
    "openssh-server",
    "python3",
    "python3-apt",
    "iproute2",
    "udev",
    "ifupdown",
    "isc-dhcp-client",
    "dbus",
    "kmod",
    "procps",
    "ca-certificates",
)
IMAGE_SIZE = "6G"

# Files written into the guest tree. The seed unit installs the per-node SSH host key, the
# lab's authorized key and the hostname from a small second disk (LABEL=labseed, /dev/vdb),
# so one cached image serves every node and host keys are known before the first boot.
GUEST_FILES: dict[str, str] = {
    "etc/fstab": "LABEL=root / ext4 defaults,errors=remount-ro 0 1\n",
    "etc/network/interfaces": "auto lo\niface lo inet loopback\n\nauto eth0\niface eth0 inet dhcp\n",
    "etc/apt/sources.list": "",
    "etc/apt/sources.list.d/debian.sources": (
        "Types: deb\nURIs: {mirror}\nSuites: bookworm bookworm-updates\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: {security_mirror}\nSuites: bookworm-security\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    ),
    "etc/ssh/sshd_config.d/lab.conf": (
        "HostKey /etc/ssh/ssh_host_ed25519_key\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nUseDNS no\n"
    ),
    "usr/local/sbin/lab-seed": (
        "#!/bin/sh\n"
        "# Applies the lab seed disk: SSH host key, authorized key, hostname.\n"
        "set -eu\n"
        "mkdir -p /run/lab-seed\n"
        "mount -o ro /dev/vdb /run/lab-seed\n"
        "install -d -m 700 /root/.ssh\n"
        "install -m 600 /run/lab-seed/authorized_keys /root/.ssh/authorized_keys\n"
        "install -m 600 /run/lab-seed/ssh_host_ed25519_key /etc/ssh/ssh_host_ed25519_key\n"
        "install -m 644 /run/lab-seed/ssh_host_ed25519_key.pub /etc/ssh/ssh_host_ed25519_key.pub\n"
        "name=$(cat /run/lab-seed/hostname)\n"
        'echo "$name" > /etc/hostname\n'
        'hostname "$name"\n'
        'grep -q " $name$" /etc/hosts || echo "127.0.1.1 $name" >> /etc/hosts\n'
        "umount /run/lab-seed\n"
    ),
    "etc/systemd/system/lab-seed.service": (
        "[Unit]\nDescription=Apply the lab seed disk (SSH keys, hostname)\n"
        "DefaultDependencies=no\nBindsTo=dev-vdb.device\nAfter=dev-vdb.device local-fs.target\n"
        "Before=ssh.service network-pre.target\nWants=network-pre.target\n\n"
        "[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/usr/local/sbin/lab-seed\n\n"
        "[Install]\nWantedBy=multi-user.target\n"
    ),
    # qemu boots the kernel and initrd kept beside the image (built with Debian's default,
    # MODULES=most, in the chroot), never the guest's /boot/initrd.img. The guest still rebuilds its
    # own whenever a package's trigger or the driver role asks (and the lab reads the blacklist in
    # it), so it builds only the modules this VM uses: under TCG a rebuild took 151 s with `most`
    # and 47 s with `dep`, with the same hooks and /etc files inside.
    "etc/initramfs-tools/conf.d/lab-modules.conf": "MODULES=dep\n",
    "etc/hosts": "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n",
    "etc/hostname": "lab-node\n",
}
RECIPE_VERSION = 1


class ImageError(RuntimeError):
    pass


@dataclass(frozen=True)
class Image:
    directory: Path

    @property
    def rootfs(self) -> Path:
        return self.directory / "rootfs.img"

    @property
    def kernel(self) -> Path:
        return self.directory / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.directory / "initrd.img"

    def exists(self) -> bool:
        return all(p.is_file() for p in (self.rootfs, self.kernel, self.initrd, self.directory / "manifest.json"))


def image_inputs() -> dict[str, object]:
    mirror, security = mirrors()
    return {
        "recipe": RECIPE_VERSION,
        "suite": SUITE,
        "mirror": mirror,
        "security_mirror": security,
        "packages": sorted(PACKAGES),
        "size": IMAGE_SIZE,
        "files": GUEST_FILES,
    }


def image_key() -> str:
    blob = json.dumps(image_inputs(), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def cached_image(cache_dir: Path) -> Image:
    return Image(cache_dir / "images" / f"debian12-{image_key()}")


def _run(cmd: list[str], log: Path) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        result = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-20:]
        raise ImageError(f"{cmd[0]} failed (exit {result.returncode}); last lines of {log}:\n" + "\n".join(tail))


def _configure_tree(tree: Path) -> None:
    mirror, security = mirrors()
    for relative, content in GUEST_FILES.items():
        path = tree / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content.format(mirror=mirror, security_mirror=security))
    (tree / "usr/local/sbin/lab-seed").chmod(0o755)
    wants = tree / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    link = wants / "lab-seed.service"
    if not link.is_symlink():
        link.symlink_to("/etc/systemd/system/lab-seed.service")
    # Each node gets its own host key from the seed disk and its own machine id at first boot.
    for key in (tree / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (tree / "etc/machine-id").write_text("")
    dbus_id = tree / "var/lib/dbus/machine-id"
    if dbus_id.exists() or dbus_id.is_symlink():
        dbus_id.unlink()
    shutil.rmtree(tree / "var/cache/apt/archives", ignore_errors=True)
    (tree / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)


def build(image: Image, log: Path) -> float:
    """Build the image into a temporary directory and move it into place; returns seconds."""
    started = time.monotonic()
    parent = image.directory.parent
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=parent))
    try:
        tree = work / "tree"
        mirror, _ = mirrors()
        _run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(tree), mirror],
            log,
        )
        _configure_tree(tree)
        kernels = sorted((tree / "boot").glob("vmlinuz-*"))
        initrds = sorted((tree / "boot").glob("initrd.img-*"))
        if not kernels or not initrds:
            raise ImageError(f"no kernel or initrd under {tree / 'boot'}; see {log}")
        out = work / "image"
        out.mkdir()
        shutil.copy2(kernels[-1], out / "vmlinuz")
        shutil.copy2(initrds[-1], out / "initrd.img")
        _run(["mkfs.ext4", "-q", "-F", "-d", str(tree), "-L", "root", str(out / "rootfs.img"), IMAGE_SIZE], log)
        manifest = {"key": image_key(), "inputs": image_inputs(), "kernel": kernels[-1].name}
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
        out.rename(image.directory)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return time.monotonic() - started


def ensure(cache_dir: Path) -> tuple[Image, float | None]:
    """The cached image, built first if missing. Returns (image, build seconds or None)."""
    image = cached_image(cache_dir)
    if image.exists():
        return image, None
    for tool in ("debootstrap", "mkfs.ext4"):
        if shutil.which(tool) is None:
            raise ImageError(f"{tool} is not installed; run `make deps` (Debian packages debootstrap, e2fsprogs)")
    cache_dir.mkdir(parents=True, exist_ok=True)
    with (cache_dir / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if image.exists():  # another process built it while we waited
            return image, None
        log = cache_dir / f"build-{image_key()}.log"
        log.write_text("")
        print(f"lab: building image {image.directory.name} (debootstrap, about a minute; log {log})", file=sys.stderr)
        return image, build(image, log)
