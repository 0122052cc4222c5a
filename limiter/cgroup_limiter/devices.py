"""Block devices by name (`vda`, `/dev/nvme0n1`) or number (`254:0`), checked against sysfs."""

from __future__ import annotations

from pathlib import Path

from cgroup_limiter.iofiles import DEVICE_RE


class UnknownDevice(LookupError):
    """A device the node does not have."""


class DeviceResolver:
    """Answers are cached until `forget()`, which the agent calls once per scan (hotplug)."""

    def __init__(self, sysfs_root: Path) -> None:
        self.sysfs_root = sysfs_root
        self._cache: dict[str, str | None] = {}

    def forget(self) -> None:
        self._cache.clear()

    def _lookup(self, spec: str) -> str | None:
        if DEVICE_RE.match(spec):
            return spec if (self.sysfs_root / "dev/block" / spec).exists() else None
        name = spec.removeprefix("/dev/")
        if not name or "/" in name:
            return None
        try:
            number = (self.sysfs_root / "class/block" / name / "dev").read_text().strip()
        except OSError:
            return None
        return number if DEVICE_RE.match(number) else None

    def resolve(self, spec: str) -> str:
        if spec not in self._cache:
            self._cache[spec] = self._lookup(spec)
        number = self._cache[spec]
        if number is None:
            raise UnknownDevice(f"block device {spec!r} is not on this node (looked in {self.sysfs_root})")
        return number
