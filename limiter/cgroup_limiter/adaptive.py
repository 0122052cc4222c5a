"""Adaptive IO throttling: one small state machine per (pod, device, direction).

   calm --(rate > threshold for K scans)--> throttled at the ceiling
   throttled --(rate < release for M scans)--> calm

release < ceiling <= threshold (AdaptiveSettings.check): a pod that keeps pushing stays at
the ceiling, above release, so it stays throttled instead of flapping.
"""

from __future__ import annotations

from dataclasses import dataclass

from cgroup_limiter.config import AdaptiveSettings

DIRECTIONS = ("read", "write")
THROTTLE = "throttle"
RELEASE = "release"


@dataclass
class Trigger:
    throttled: bool = False
    above: int = 0
    calm: int = 0

    def observe(self, rate_bps: float, settings: AdaptiveSettings) -> str | None:
        """Feed one interval's rate; returns THROTTLE or RELEASE on a transition."""
        if not self.throttled:
            self.above = self.above + 1 if rate_bps > settings.threshold_bps else 0
            if self.above >= settings.trigger_intervals:
                self.throttled, self.above, self.calm = True, 0, 0
                return THROTTLE
            return None
        self.calm = self.calm + 1 if rate_bps < settings.release_bps else 0
        if self.calm >= settings.calm_intervals:
            self.throttled, self.above, self.calm = False, 0, 0
            return RELEASE
        return None
