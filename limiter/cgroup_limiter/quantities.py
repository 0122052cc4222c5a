"""Byte rates and IO limits as people write them: `100M`, `50Mi`, `8388608`, `max`."""

from __future__ import annotations

import re

from cgroup_limiter.iofiles import IO_MAX_KEYS, IoLimit

_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]i?)?$")
_FACTORS = {
    None: 1,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


class QuantityError(ValueError):
    """A value that is no byte rate or limit; the message says what was expected."""


def parse_bytes(value: object) -> int:
    """`100M` = 100 * 10**6 (decimal, as in MB/s), `50Mi` = 50 * 2**20; plain integers are bytes."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a byte rate")
    if isinstance(value, int):
        if value <= 0:
            raise QuantityError(f"{value} must be positive")
        return value
    match = _SIZE_RE.match(str(value).strip())
    if not match:
        raise QuantityError(f"{value!r} is not a byte rate (examples: 8388608, 100M, 50Mi)")
    number = float(match.group(1)) * _FACTORS[match.group(2)]
    if number < 1:
        raise QuantityError(f"{value!r} must be at least one byte")
    return int(number)


def parse_iops(value: object) -> int:
    if isinstance(value, bool) or not (isinstance(value, int) or str(value).isdigit()) or int(str(value)) <= 0:
        raise QuantityError(f"{value!r} is not a positive integer of IO operations per second")
    return int(str(value))


def parse_limit(fields: dict[str, object]) -> IoLimit:
    """{rbps: 100M, wiops: 500} -> an io.max limit; `max` or a missing key means unlimited."""
    unknown = sorted(set(fields) - set(IO_MAX_KEYS))
    if unknown:
        raise QuantityError(f"unknown io.max key(s) {', '.join(unknown)} (known: {', '.join(IO_MAX_KEYS)})")
    values: list[int | None] = []
    for key in IO_MAX_KEYS:
        raw = fields.get(key)
        if raw is None or raw == "max":
            values.append(None)
        else:
            values.append(parse_bytes(raw) if key.endswith("bps") else parse_iops(raw))
    if all(v is None for v in values):
        raise QuantityError("sets no limit (give at least one of rbps, wbps, riops, wiops)")
    return (values[0], values[1], values[2], values[3])


def parse_io_max_spec(text: str) -> dict[str, IoLimit]:
    """`vda wbps=100M riops=1000; 8:0 rbps=50M` (devices by name or MAJ:MIN) -> device spec -> limit."""
    limits: dict[str, IoLimit] = {}
    for entry in re.split(r"[;\n]", text):
        if not entry.strip():
            continue
        device, *items = entry.split()
        fields: dict[str, object] = {}
        for item in items:
            key, sep, value = item.partition("=")
            if not sep:
                raise QuantityError(f"{entry.strip()!r}: {item!r} is not KEY=VALUE")
            fields[key] = value
        try:
            limits[device] = parse_limit(fields)
        except QuantityError as error:
            raise QuantityError(f"{entry.strip()!r}: {error}") from None
    if not limits:
        raise QuantityError(f"{text!r} names no device")
    return limits
