"""Pressure stall information (PSI) for IO: the node's /proc/pressure/io and a cgroup's io.pressure.

Both have the kernel's format (Documentation/accounting/psi.rst):
  some avg10=0.00 avg60=0.00 avg300=0.00 total=0
  full avg10=0.00 avg60=0.00 avg300=0.00 total=0
`some`: the share of time (percent, averaged over 10/60/300 s) in which at least one task of
the node or cgroup waited for IO; `full`: all of its non-idle tasks at once; `total`: the
stall time in microseconds. Kernels without PSI (CONFIG_PSI off, or booted with psi=0) have
neither file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE = re.compile(r"^(some|full) avg10=(\d+\.\d+) avg60=(\d+\.\d+) avg300=(\d+\.\d+) total=(\d+)$")


class PressureFormatError(ValueError):
    """A pressure file whose text is not PSI; names the line."""


@dataclass(frozen=True)
class Stall:
    avg10: float
    avg60: float
    avg300: float
    total_us: int


@dataclass(frozen=True)
class Pressure:
    some: Stall
    full: Stall | None  # absent in a few old kernels' files (cpu before 5.13); io always has it


def parse_pressure(text: str) -> Pressure:
    lines: dict[str, Stall] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _LINE.match(line.strip())
        if not match:
            raise PressureFormatError(f"not a PSI line: {line!r}")
        kind, avg10, avg60, avg300, total = match.groups()
        lines[kind] = Stall(float(avg10), float(avg60), float(avg300), int(total))
    if "some" not in lines:
        raise PressureFormatError(f"no 'some' line in {text!r}")
    return Pressure(lines["some"], lines.get("full"))
