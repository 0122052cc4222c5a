"""Hysteresis: one small state machine, used twice.

   off --(value > band.high for band.trigger scans)--> on
   on  --(value < band.low for band.calm scans)------> off

Per (pod, device, direction) in threshold mode, the value is the pod's IO rate (on: capped at
the ceiling; release < ceiling <= threshold, so a pod that keeps pushing stays capped instead of
flapping). Once per node in contention mode, the value is the protected pods' IO pressure (on:
the heaviest unprotected pods may be capped).
"""

from __future__ import annotations

from dataclasses import dataclass

from cgroup_limiter.config import Band

DIRECTIONS = ("read", "write")
THROTTLE = "throttle"
RELEASE = "release"


@dataclass
class Trigger:
    throttled: bool = False
    above: int = 0
    calm: int = 0

    def observe(self, value: float, band: Band) -> str | None:
        """Feed one interval's value; returns THROTTLE or RELEASE on a transition."""
        if not self.throttled:
            self.above = self.above + 1 if value > band.high else 0
            if self.above >= band.trigger:
                self.throttled, self.above, self.calm = True, 0, 0
                return THROTTLE
            return None
        self.calm = self.calm + 1 if value < band.low else 0
        if self.calm >= band.calm:
            self.throttled, self.above, self.calm = False, 0, 0
            return RELEASE
        return None
