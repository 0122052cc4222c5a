"""The cgroup v2 IO and CPU interface files: io.stat, io.max, cpu.weight, cpu.max.

Formats (Documentation/admin-guide/cgroup-v2.rst):
  io.stat     `MAJ:MIN rbytes=N wbytes=N rios=N wios=N dbytes=N dios=N` one line per device
  io.max      `MAJ:MIN rbps=N|max wbps=N|max riops=N|max wiops=N|max` one line per limited device
  cpu.weight  an integer in [1, 10000] (100 is the kernel default)
  cpu.max     `QUOTA PERIOD` in microseconds, QUOTA may be `max`
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

IO_MAX_KEYS = ("rbps", "wbps", "riops", "wiops")
DEVICE_RE = re.compile(r"^\d+:\d+$")
CPU_WEIGHT_RANGE = (1, 10000)

# One device's io.max line: key -> limit, None meaning `max` (unlimited).
IoLimit = tuple[int | None, int | None, int | None, int | None]
UNLIMITED: IoLimit = (None, None, None, None)


def read_file(path: str) -> str:
    """One small interface file in one read(2): cheaper than open() with its text layer."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 1 << 16).decode()
    finally:
        os.close(fd)


class IoFileError(ValueError):
    """A line of an interface file that does not parse; names the line."""


@dataclass(frozen=True)
class IoCounters:
    rbytes: int
    wbytes: int


# The kernel's own order (blkcg_print_one_stat): rbytes and wbytes come first.
_IO_STAT_LINE = re.compile(r"(\d+:\d+) rbytes=(\d+) wbytes=(\d+) ")


def parse_io_stat(text: str) -> tuple[dict[str, IoCounters], list[str]]:
    """Counters per device and the lines that did not parse (the caller counts those)."""
    counters: dict[str, IoCounters] = {}
    bad: list[str] = []
    for line in text.splitlines():
        fast = _IO_STAT_LINE.match(line)
        if fast:
            counters[fast.group(1)] = IoCounters(int(fast.group(2)), int(fast.group(3)))
            continue
        if not line.strip():
            continue
        device, _, rest = line.partition(" ")
        fields: dict[str, str] = {}
        for item in rest.split():
            key, sep, value = item.partition("=")
            if sep:
                fields[key] = value
        try:
            rbytes, wbytes = fields["rbytes"], fields["wbytes"]
            if not (DEVICE_RE.match(device) and rbytes.isdigit() and wbytes.isdigit()):
                raise ValueError(line)
            counters[device] = IoCounters(int(rbytes), int(wbytes))
        except (KeyError, ValueError):
            bad.append(line)
    return counters, bad


def _limit_value(key: str, value: str, line: str) -> int | None:
    if value == "max":
        return None
    if not value.isdigit():
        raise IoFileError(f"io.max line {line!r}: {key}={value!r} is neither a number nor 'max'")
    return int(value)


def parse_io_max(text: str) -> dict[str, IoLimit]:
    """io.max as the kernel prints it; a device without a line is unlimited."""
    limits: dict[str, IoLimit] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        device, *items = line.split()
        if not DEVICE_RE.match(device):
            raise IoFileError(f"io.max line {line!r}: {device!r} is not MAJ:MIN")
        values: dict[str, int | None] = dict.fromkeys(IO_MAX_KEYS)
        for item in items:
            key, _, value = item.partition("=")
            if key in values:
                values[key] = _limit_value(key, value, line)
        limits[device] = (values["rbps"], values["wbps"], values["riops"], values["wiops"])
    return limits


def format_io_max(device: str, limit: IoLimit) -> str:
    """One io.max write: every key spelled out, so the kernel's line equals what we meant."""
    items = " ".join(
        f"{key}={'max' if value is None else value}" for key, value in zip(IO_MAX_KEYS, limit, strict=True)
    )
    return f"{device} {items}"


def merge_limits(a: IoLimit, b: IoLimit) -> IoLimit:
    """The tighter of two limits, key by key."""
    r = [y if x is None else x if y is None else min(x, y) for x, y in zip(a, b, strict=True)]
    return (r[0], r[1], r[2], r[3])


def parse_cpu_max(value: str) -> str:
    """Normalise `QUOTA [PERIOD]` to the kernel's two-field form; raises IoFileError."""
    parts = value.split()
    if not 1 <= len(parts) <= 2:
        raise IoFileError(f"cpu.max {value!r}: expected 'QUOTA PERIOD' or 'max'")
    quota, period = parts[0], parts[1] if len(parts) == 2 else "100000"
    if quota != "max" and not (quota.isdigit() and int(quota) >= 1000):
        raise IoFileError(f"cpu.max {value!r}: quota must be 'max' or at least 1000 (microseconds)")
    if not (period.isdigit() and 1000 <= int(period) <= 1_000_000):
        raise IoFileError(f"cpu.max {value!r}: period must be 1000..1000000 microseconds")
    return f"{quota} {period}"


def parse_cpu_weight(value: str) -> int:
    low, high = CPU_WEIGHT_RANGE
    if not value.strip().isdigit() or not low <= int(value) <= high:
        raise IoFileError(f"cpu.weight {value!r}: expected an integer in {low}..{high}")
    return int(value)
