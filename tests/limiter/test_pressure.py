"""PSI files as the kernel writes them: /proc/pressure/io and a cgroup's io.pressure."""

from __future__ import annotations

from pathlib import Path

import pytest
from cgroup_limiter.pressure import PressureFormatError, Stall, parse_pressure
from hypothesis import given
from hypothesis import strategies as st

KERNEL_TEXT = (
    "some avg10=0.88 avg60=1.25 avg300=2.26 total=143997284\nfull avg10=0.58 avg60=0.63 avg300=1.29 total=92817672\n"
)


def test_the_kernels_format():
    pressure = parse_pressure(KERNEL_TEXT)
    assert pressure.some == Stall(0.88, 1.25, 2.26, 143997284)
    assert pressure.full == Stall(0.58, 0.63, 1.29, 92817672)


@pytest.mark.skipif(not Path("/proc/pressure/io").exists(), reason="this kernel has no PSI")
def test_this_machines_own_file_parses():
    pressure = parse_pressure(Path("/proc/pressure/io").read_text())
    assert 0.0 <= pressure.some.avg10 <= 100.0
    assert pressure.full is not None and pressure.full.total_us <= pressure.some.total_us


def test_a_file_without_full_still_has_some():
    assert parse_pressure("some avg10=3.00 avg60=2.00 avg300=1.00 total=5\n").full is None


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("some avg10=lots\n", "not a PSI line: 'some avg10=lots'"),
        ("full avg10=1.00 avg60=1.00 avg300=1.00 total=1\n", "no 'some' line"),
        ("", "no 'some' line"),
    ],
)
def test_bad_text_names_the_line(text: str, match: str):
    with pytest.raises(PressureFormatError, match=match):
        parse_pressure(text)


percent = st.floats(0, 100, allow_nan=False).map(lambda value: round(value, 2))


@given(percent, percent, percent, st.integers(0, 2**63 - 1))
def test_what_the_kernel_prints_round_trips(avg10: float, avg60: float, avg300: float, total: int):
    line = f"avg10={avg10:.2f} avg60={avg60:.2f} avg300={avg300:.2f} total={total}"
    pressure = parse_pressure(f"some {line}\nfull {line}\n")
    assert pressure.some == pressure.full == Stall(avg10, avg60, avg300, total)
