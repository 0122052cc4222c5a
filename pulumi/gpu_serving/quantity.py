"""Kubernetes resource quantities ("500m", "8Gi", "2") as numbers, to compare requests with limits."""

from __future__ import annotations

import re
from decimal import Decimal

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
}
_QUANTITY = re.compile(r"^(?P<number>\d+(\.\d+)?)(?P<suffix>[a-zA-Z]*)$")


def parse_quantity(text: str) -> Decimal:
    """'500m' -> 0.5, '8Gi' -> 8589934592; ValueError for anything else."""
    match = _QUANTITY.match(text)
    if not match or match["suffix"] not in _SUFFIXES:
        known = ", ".join(s for s in _SUFFIXES if s)
        raise ValueError(f"{text!r} is not a Kubernetes quantity (a number with an optional suffix {known})")
    return Decimal(match["number"]) * _SUFFIXES[match["suffix"]]
