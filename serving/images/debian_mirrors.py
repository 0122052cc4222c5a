"""The Debian archives that debootstrap trees come from: the container base image here, and the
qemu lab's VM image, which imports this. No snapshot archive is reachable, so these are the
plain mirrors; LAB_MIRROR and LAB_SECURITY_MIRROR point both builds at a local one."""

from __future__ import annotations

import os


def mirrors() -> tuple[str, str]:
    """(main archive, security archive) URLs."""
    return (
        os.environ.get("LAB_MIRROR", "http://deb.debian.org/debian"),
        os.environ.get("LAB_SECURITY_MIRROR", "http://deb.debian.org/debian-security"),
    )
