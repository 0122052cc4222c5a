"""Driver branch lifecycle: is a branch inside NVIDIA's support on a date, and does a waiver cover it.

NVIDIA publishes the end of life of a branch as a month ("June 2026"); the branch is supported
through the last day of that month. A waiver is the inventory's explicit, named acceptance of an
unsupported branch: {branch: "535", reason: "...", expires: 2027-01-31 (optional)}.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterator, Mapping
from datetime import date
from typing import Any

WAIVER_KEYS = ("branch", "reason", "expires")
KINDS = {"lts": "long-term support", "production": "production", "new_feature": "new feature"}


def last_supported_day(end_of_life: str) -> date:
    """'2026-06' -> 2026-06-30."""
    year, month = (int(part) for part in end_of_life.split("-"))
    return date(year, month, calendar.monthrange(year, month)[1])


def unsupported_reason(branch: str, entry: Mapping[str, Any] | None, on: date) -> str | None:
    """Why R<branch> is outside NVIDIA's support on `on`, or None while it is supported."""
    if entry is None:
        return f"R{branch} has no entry in nvidia_driver.branches, so its support lifecycle is unknown"
    if entry["kind"] == "new_feature":
        return f"R{branch} is a new feature branch: short-lived, no end of life date, not for production"
    if entry["end_of_life"] == "ended":
        return f"R{branch} is past its end of life (NVIDIA lists it as end of life)"
    last = last_supported_day(entry["end_of_life"])
    if on > last:
        return f"R{branch} ({KINDS[entry['kind']]} branch) reached its end of life on {last.isoformat()}"
    return None


def _expiry(value: object) -> date | None:
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value)
        except ValueError:
            return None
    return None


def waiver_problems(waiver: Mapping[str, Any], on: date) -> Iterator[str]:
    """What makes a waiver invalid: it must name a branch and a reason; an expiry must be a date."""
    unknown = sorted(set(waiver) - set(WAIVER_KEYS))
    if unknown:
        yield f"unknown key(s) {', '.join(unknown)}; a waiver has {', '.join(WAIVER_KEYS)}"
    branch = waiver.get("branch")
    if not (isinstance(branch, (str, int)) and str(branch).isdigit() and len(str(branch)) == 3):
        yield f'branch must name the waived driver branch, such as "535" (got {branch!r})'
    reason = waiver.get("reason")
    if not (isinstance(reason, str) and reason.strip()):
        yield "reason must say why the unsupported branch is accepted"
    if "expires" in waiver:
        expires = _expiry(waiver["expires"])
        if expires is None:
            yield f"expires must be a date (YYYY-MM-DD), got {waiver['expires']!r}"
        elif on > expires:
            yield f"the waiver expired on {expires.isoformat()}"
