"""Find the pod-level cgroups the kubelet creates, for both of its cgroup drivers.

systemd   kubepods.slice/kubepods-pod<UID>.slice                          (Guaranteed)
          kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<UID>.slice  (burstable, besteffort)
          the UID's dashes are underscores in the unit name
cgroupfs  kubepods/pod<UID>, kubepods/<qos>/pod<UID>
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

QOS_CLASSES = ("burstable", "besteffort")
_SYSTEMD_POD = re.compile(r"^kubepods(?:-(burstable|besteffort))?-pod([0-9A-Za-z_]+)\.slice$")
_CGROUPFS_POD = re.compile(r"^pod([0-9A-Za-z-]+)$")


@dataclass(frozen=True)
class PodCgroup:
    uid: str
    qos: str  # guaranteed, burstable or besteffort
    path: str  # a plain string: the scan builds thousands of these a second
    driver: str  # systemd or cgroupfs


def _subdirs(path: str) -> list[str]:
    """Directory names under path; a path that is missing or vanishes mid-scan has none."""
    try:
        with os.scandir(path) as entries:
            return [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _systemd(root: str) -> list[PodCgroup]:
    top = f"{root}/kubepods.slice"
    found = []
    for qos in ("guaranteed", *QOS_CLASSES):
        parent = top if qos == "guaranteed" else f"{top}/kubepods-{qos}.slice"
        for name in _subdirs(parent):
            match = _SYSTEMD_POD.match(name)
            if match and (match.group(1) or "guaranteed") == qos:
                found.append(PodCgroup(match.group(2).replace("_", "-"), qos, f"{parent}/{name}", "systemd"))
    return found


def _cgroupfs(root: str) -> list[PodCgroup]:
    top = f"{root}/kubepods"
    found = []
    for qos in ("guaranteed", *QOS_CLASSES):
        parent = top if qos == "guaranteed" else f"{top}/{qos}"
        for name in _subdirs(parent):
            match = _CGROUPFS_POD.match(name)
            if match:
                found.append(PodCgroup(match.group(1), qos, f"{parent}/{name}", "cgroupfs"))
    return found


def discover(root: Path) -> list[PodCgroup]:
    """Every pod cgroup under root (normally /sys/fs/cgroup), both layouts."""
    return _systemd(str(root)) + _cgroupfs(str(root))
