"""monitoring.promql: which metric names a PromQL expression reads."""

from __future__ import annotations

import pytest

from monitoring.promql import PromQLError, metric_names


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
        ("a > bool 0.5 and b or c unless d", {"a", "b", "c", "d"}),
        ("histogram_quantile(0.99, sum by (le) (rate(x_seconds_bucket[5m])))", {"x_seconds_bucket"}),
        ('nv_inference_request_summary_us{quantile="0.99"} / 1e6', {"nv_inference_request_summary_us"}),
        ("rate(a[5m] offset 1h30m) - rate(a[5m] offset -1d)", {"a"}),
        ("max_over_time(rate(a[1m])[30m:1m])", {"a"}),
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
        ('a{label="with } brace and \\" quote"}', {"a"}),
        ("a{l=`raw \\ string`} # a comment naming not_a_metric", {"a"}),
        ("vector(1) unless absent(a)", {"a"}),
        ("(a + b)\n  / c", {"a", "b", "c"}),
    ],
)
def test_names(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


@pytest.mark.parametrize(
    "expr",
    ['a{model="unterminated}', "rate(a[5m)", "a{b=1", "sum by (model rate(a)", "a ; b"],
)
def test_unreadable_expressions_raise(expr: str) -> None:
    with pytest.raises(PromQLError):
        metric_names(expr)
