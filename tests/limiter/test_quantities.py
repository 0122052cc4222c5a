"""Byte rates and io.max specs as people write them in the config and in annotations."""

from __future__ import annotations

import pytest
from cgroup_limiter.quantities import QuantityError, parse_bytes, parse_io_max_spec, parse_limit
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("text", "value"),
    [("8388608", 8388608), ("100M", 100_000_000), ("50Mi", 50 * 2**20), ("1.5G", 1_500_000_000), (" 2Ki ", 2048)],
)
def test_units(text, value):
    assert parse_bytes(text) == value


@given(st.integers(1, 10**15))
def test_plain_integers_are_bytes(number):
    assert parse_bytes(number) == number == parse_bytes(str(number))


@pytest.mark.parametrize("bad", ["", "fast", "10MB", "-1", "0", 0, True, "0.1"])
def test_not_a_rate(bad):
    with pytest.raises(QuantityError):
        parse_bytes(bad)


def test_limit_fields():
    assert parse_limit({"rbps": "100M", "wiops": 500}) == (100_000_000, None, None, 500)
    assert parse_limit({"wbps": "max", "riops": "7"}) == (None, None, 7, None)
    with pytest.raises(QuantityError, match=r"unknown io\.max key"):
        parse_limit({"bps": 1})
    with pytest.raises(QuantityError, match="sets no limit"):
        parse_limit({"wbps": "max"})
    with pytest.raises(QuantityError, match="IO operations"):
        parse_limit({"riops": "1.5"})


def test_annotation_spec_with_several_devices():
    spec = parse_io_max_spec("vda wbps=100M riops=1000; 8:0 rbps=50M\n/dev/nvme0n1 wiops=9")
    assert spec == {
        "vda": (None, 100_000_000, 1000, None),
        "8:0": (50_000_000, None, None, None),
        "/dev/nvme0n1": (None, None, None, 9),
    }


@pytest.mark.parametrize(
    ("text", "match"), [("vda wbps", "not KEY=VALUE"), (" ; ", "names no device"), ("vda x=1", "'vda x=1'")]
)
def test_annotation_spec_errors_quote_the_entry(text, match):
    with pytest.raises(QuantityError, match=match):
        parse_io_max_spec(text)
