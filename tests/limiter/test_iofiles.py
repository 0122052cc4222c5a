"""Parsing and writing the cgroup v2 interface files, with property tests on the round trips."""

from __future__ import annotations

import pytest
from cgroup_limiter.iofiles import (
    UNLIMITED,
    IoCounters,
    IoFileError,
    format_io_max,
    merge_limits,
    parse_cpu_max,
    parse_cpu_weight,
    parse_io_max,
    parse_io_stat,
)
from hypothesis import given
from hypothesis import strategies as st

limits = st.tuples(*[st.one_of(st.none(), st.integers(1, 2**63 - 1))] * 4)
devices = st.builds(lambda a, b: f"{a}:{b}", st.integers(0, 4095), st.integers(0, 2**20 - 1))


def test_io_stat_as_the_kernel_prints_it():
    text = "254:0 rbytes=0 wbytes=33554432 rios=0 wios=32 dbytes=0 dios=0\n259:0 rbytes=4096 wbytes=0 rios=1 wios=0\n"
    counters, bad = parse_io_stat(text)
    assert counters == {"254:0": IoCounters(0, 33554432), "259:0": IoCounters(4096, 0)}
    assert bad == []


@pytest.mark.parametrize(
    "line",
    ["garbage", "254:0 wbytes=1", "254:0 rbytes=x wbytes=1", "sda rbytes=1 wbytes=1", "254:0 rbytes=-1 wbytes=2"],
)
def test_malformed_io_stat_lines_are_returned_not_raised(line):
    counters, bad = parse_io_stat(f"{line}\n8:0 rbytes=1 wbytes=2 rios=1 wios=1\n")
    assert bad == [line]
    assert counters == {"8:0": IoCounters(1, 2)}


@given(devices, limits)
def test_io_max_line_round_trips(device, limit):
    assert parse_io_max(format_io_max(device, limit)) == {device: limit}


def test_io_max_as_the_kernel_prints_it():
    text = "254:0 rbps=max wbps=8388608 riops=max wiops=max\n8:16 rbps=1000 wbps=max riops=10 wiops=max\n"
    assert parse_io_max(text) == {"254:0": (None, 8388608, None, None), "8:16": (1000, None, 10, None)}
    assert parse_io_max("") == {}
    with pytest.raises(IoFileError, match="wbps='fast'"):
        parse_io_max("254:0 wbps=fast")


@given(limits, limits)
def test_merge_takes_the_tighter_limit_key_by_key(a, b):
    merged = merge_limits(a, b)
    assert merged == merge_limits(b, a)
    assert merge_limits(a, UNLIMITED) == a
    for x, y, m in zip(a, b, merged, strict=True):
        assert m == (y if x is None else x if y is None else min(x, y))


@pytest.mark.parametrize(
    ("value", "normal"), [("max", "max 100000"), ("50000", "50000 100000"), ("200000 100000", "200000 100000")]
)
def test_cpu_max(value, normal):
    assert parse_cpu_max(value) == normal


@pytest.mark.parametrize("value", ["", "10 100000", "1000 10", "max 2000000", "a b c", "-5 100000"])
def test_cpu_max_rejects(value):
    with pytest.raises(IoFileError, match=r"cpu\.max"):
        parse_cpu_max(value)


def test_cpu_weight_range():
    assert parse_cpu_weight("10000") == 10000
    for bad in ("0", "10001", "x", ""):
        with pytest.raises(IoFileError, match=r"1\.\.10000"):
            parse_cpu_weight(bad)
