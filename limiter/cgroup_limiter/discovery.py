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
    path: Path
    driver: str  # systemd or cgroupfs


def _subdirs(path: Path) -> list[str]:
    """Directory names under path; a path that is missing or vanishes mid-scan has none."""
    try:
        with os.scandir(path) as entries:
            return [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _systemd(root: Path) -> list[PodCgroup]:
    top = root / "kubepods.slice"
    found = []
    parents = [top] + [top / f"kubepods-{qos}.slice" for qos in QOS_CLASSES]
    for parent in parents:
        for name in _subdirs(parent):
            match = _SYSTEMD_POD.match(name)
            if match:
                qos = match.group(1) or "guaranteed"
                expected_parent = top if qos == "guaranteed" else top / f"kubepods-{qos}.slice"
                if parent == expected_parent:
                    found.append(PodCgroup(match.group(2).replace("_", "-"), qos, parent / name, "systemd"))
    return found


def _cgroupfs(root: Path) -> list[PodCgroup]:
    top = root / "kubepods"
    found = []
    for qos, parent in [("guaranteed", top)] + [(qos, top / qos) for qos in QOS_CLASSES]:
        for name in _subdirs(parent):
            match = _CGROUPFS_POD.match(name)
            if match:
                found.append(PodCgroup(match.group(1), qos, parent / name, "cgroupfs"))
    return found


def discover(root: Path) -> list[PodCgroup]:
    """Every pod cgroup under root (normally /sys/fs/cgroup), both layouts."""
    return _systemd(root) + _cgroupfs(root)
