"""monitoring.promql: which metric names a PromQL expression reads, from promql-parser's syntax tree."""

from __future__ import annotations

import pytest

from monitoring.promql import Matcher, PromQLError, Selector, metric_names, selectors


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("up", {"up"}),
        ("nv_inference_count", {"nv_inference_count"}),
        ('rate(nv_inference_count{model="a", version=~"1|2"}[5m])', {"nv_inference_count"}),
        ("sum by (model, version) (rate(nv_inference_request_success[1m]))", {"nv_inference_request_success"}),
        ("sum(rate(nv_inference_request_success[1m])) by (model)", {"nv_inference_request_success"}),
        ("sum without (instance, pod) (a)", {"a"}),
        ("a / on (model) group_left (version) b", {"a", "b"}),
        ("a * ignoring(le) group_right b", {"a", "b"}),
        ("a and on () b", {"a", "b"}),
        ("a > bool 0.5 and b or c unless d", {"a", "b", "c", "d"}),
        ("histogram_quantile(0.99, sum by (le) (rate(x_seconds_bucket[5m])))", {"x_seconds_bucket"}),
        ('nv_inference_request_summary_us{quantile="0.99"} / 1e6', {"nv_inference_request_summary_us"}),
        ("rate(a[5m] offset 1h30m) - rate(a[5m] offset -1d)", {"a"}),
        ("max_over_time(rate(a[1m])[30m:1m])", {"a"}),
        ("min_over_time(a[10m:])", {"a"}),
        ("a @ start() + b @ 1609746000", {"a", "b"}),
        ('{__name__="nv_inference_count", model="x"}', {"nv_inference_count"}),
        ('label_replace(a, "dst", "$1", "src", "(.*)")', {"a"}),
        ('count_values("value", DCGM_FI_DEV_XID_ERRORS)', {"DCGM_FI_DEV_XID_ERRORS"}),
        ("topk(5, a) + quantile(0.9, b)", {"a", "b"}),
        ("model_version:nv_inference_request_success:rate5m", {"model_version:nv_inference_request_success:rate5m"}),
        ("clamp_min(a, 1) > Inf or b != NaN", {"a", "b"}),
        ("0x1F + 3.5e-3 + .5", set()),
        ("time() - cgroup_limiter_last_scan_timestamp_seconds", {"cgroup_limiter_last_scan_timestamp_seconds"}),
        ('rate(a{model=~"$model", version=~"${version}"}[$__rate_interval])', {"a"}),
        ("rate(a[${__interval}]) + increase(b[$__range])", {"a", "b"}),
        ('a{label="with } brace and \\" quote"}', {"a"}),
        ("a{l=`raw string`} # a comment naming not_a_metric", {"a"}),
        ("vector(1) unless absent(a)", {"a"}),
        ("(a + b)\n  / c", {"a", "b", "c"}),
        # Label names that are also metric names, in matchers and label lists, are labels.
        ('up{nv_inference_count="1"} * on (b) group_left (c) d', {"up", "d"}),
        ("sum by (up) (a) / ignoring (up) sum without (b) (c)", {"a", "c"}),
        # Names that are functions or keywords elsewhere are metrics where they stand alone.
        ("sum + rate", {"sum", "rate"}),
    ],
)
def test_names(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_selectors_keep_their_label_matchers_without_the_name() -> None:
    expr = 'sum(rate({__name__="a", model=~"$model", version!="2"}[$__rate_interval])) / on (model) b{le!~"x"}'
    assert selectors(expr) == [
        Selector("a", (Matcher("model", "=~", "$model"), Matcher("version", "!=", "2"))),
        Selector("b", (Matcher("le", "!~", "x"),)),
    ]


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ('a{model="unterminated}', "unterminated"),
        ("rate(a[5m)", ""),
        ("a{b=1", ""),
        ("sum by (model rate(a)", "unclosed left parenthesis"),
        ("a ; b", "unexpected character: ';'"),
        ("no_such_function(a)", "unknown function"),
        ("rate(a)", "expected type matrix"),
        ('a{__name__="b"}', "metric name must not be set twice"),
        ('{__name__=~"a|b"}', 'nameless selector needs one __name__="..."'),
        ('{model="x"}', 'nameless selector needs one __name__="..."'),
        ('a{x="1" or y="2"}', "`or` between label matchers"),
        ("rate(a[$step])", ""),
    ],
)
def test_unreadable_expressions_raise(expr: str, reason: str) -> None:
    with pytest.raises(PromQLError) as raised:
        metric_names(expr)
    assert reason in str(raised.value)
    assert str(raised.value).startswith(f"cannot read {expr!r}: ")


def test_a_backslash_in_a_raw_string_is_refused_though_prometheus_takes_it() -> None:
    """A known difference of the Rust crate: backtick strings are raw in Prometheus (no escapes)."""
    with pytest.raises(PromQLError, match="unknown escape sequence"):
        metric_names(r"a{l=`\d`}")
