"""The canary AnalysisTemplates (pulumi/gpu_serving/analysis.py), offline: structure, the vendored
Argo Rollouts CRD schema, limits, and that no data or NaN is Inconclusive for every metric,
evaluated by serving.canary's runner with Argo Rollouts' rules (the lab proof is
tests/serving_lab/test_canary.py)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from gpu_serving.analysis import (
    MAX_FAILURE_RATIO,
    MAX_P95_RATIO,
    analysis_templates,
    golden_service_account,
)
from gpu_serving.analysis_names import ACCURACY_TEMPLATE, ERRORS_TEMPLATE, LATENCY_TEMPLATE
from gpu_serving.config import from_stack_file

from serving.canary.analysis import AnalysisRun, MetricResult, assess, duration_seconds, substitute
from serving.canary.conditions import evaluate

SCHEMA = Path(__file__).with_name("argo-rollouts-analysistemplate.schema.json")
ENVS = ("dev", "staging", "prod")
NO_DATA = ([], [math.nan], [math.nan, math.nan])


@pytest.fixture(scope="module", params=ENVS)
def templates(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return analysis_templates(from_stack_file(request.param))


def _metrics(templates: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for template in templates:
        for metric in template["spec"]["metrics"]:
            yield template["metadata"]["name"], metric


def _unknown_fields(data: Any, schema: dict[str, Any], path: str = "") -> Iterator[str]:
    """Fields the CRD does not declare (the API server would prune them silently)."""
    for branch in schema.get("oneOf", []) + schema.get("anyOf", []):
        yield from _unknown_fields(data, branch, path)
    open_ended = schema.get("additionalProperties") or schema.get("x-kubernetes-preserve-unknown-fields")
    if isinstance(data, dict) and "properties" in schema and not open_ended:
        for key, value in data.items():
            if key not in schema["properties"]:
                yield f"{path}/{key}"
            else:
                yield from _unknown_fields(value, schema["properties"][key], f"{path}/{key}")
    if isinstance(data, list) and "items" in schema:
        for index, item in enumerate(data):
            yield from _unknown_fields(item, schema["items"], f"{path}/{index}")


def test_three_templates_in_tritons_namespace(templates: list[dict[str, Any]]) -> None:
    names = [t["metadata"]["name"] for t in templates]
    assert names == [LATENCY_TEMPLATE, ERRORS_TEMPLATE, ACCURACY_TEMPLATE]
    assert {t["metadata"]["namespace"] for t in templates} == {"triton"}
    for template in templates:
        declared = {arg["name"] for arg in template["spec"]["args"]}
        used = set(re.findall(r"\{\{args\.([a-z-]+)\}\}", json.dumps(template["spec"]["metrics"])))
        assert used <= declared, f"{template['metadata']['name']}: undeclared args {used - declared}"
        assert {"stable-hash", "canary-hash"} <= declared
        assert not any("value" in arg for arg in template["spec"]["args"] if arg["name"].endswith("-hash"))


def test_templates_fit_the_argo_rollouts_crd_schema(templates: list[dict[str, Any]]) -> None:
    schema = json.loads(SCHEMA.read_text())
    for template in templates:
        rendered = yaml.safe_load(yaml.safe_dump(template))  # as the render writes it
        jsonschema.validate(rendered, schema)
        assert list(_unknown_fields(rendered, schema)) == [], template["metadata"]["name"]


def test_the_schema_check_catches_a_misspelt_field(templates: list[dict[str, Any]]) -> None:
    schema = json.loads(SCHEMA.read_text())
    broken = json.loads(json.dumps(templates[0]))
    broken["spec"]["metrics"][0]["failureLimits"] = 1
    assert list(_unknown_fields(broken, schema)) == ["/spec/metrics/0/failureLimits"]
    broken["spec"]["metrics"][0]["count"] = [3]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_every_metric_sets_its_limits_and_timing(templates: list[dict[str, Any]]) -> None:
    for name, metric in _metrics(templates):
        assert metric.get("failureLimit") == 0 and metric.get("inconclusiveLimit") == 0, name  # said, not defaulted
        assert isinstance(metric.get("count"), int) and metric["count"] >= 1, name
        if "prometheus" in metric["provider"]:
            assert metric["interval"] and metric["initialDelay"], name


def test_prometheus_metrics_have_both_conditions_and_no_data_matches_neither(templates: list[dict[str, Any]]) -> None:
    prometheus = [(n, m) for n, m in _metrics(templates) if "prometheus" in m["provider"]]
    assert len(prometheus) == 2
    for name, metric in prometheus:
        success, failure = metric["successCondition"], metric["failureCondition"]
        for result in NO_DATA:
            assert evaluate(success, result) is False and evaluate(failure, result) is False, (name, result)


@pytest.mark.parametrize(
    ("template", "passing", "failing"),
    [(LATENCY_TEMPLATE, MAX_P95_RATIO, MAX_P95_RATIO + 0.01), (ERRORS_TEMPLATE, MAX_FAILURE_RATIO, 0.002)],
)
def test_conditions_draw_the_line_at_the_bound(
    templates: list[dict[str, Any]], template: str, passing: float, failing: float
) -> None:
    metric = next(m for n, m in _metrics(templates) if n == template)
    assert evaluate(metric["successCondition"], [passing]) and not evaluate(metric["failureCondition"], [passing])
    assert evaluate(metric["failureCondition"], [failing]) and not evaluate(metric["successCondition"], [failing])
    assert evaluate(metric["failureCondition"], [math.inf]), "an infinite ratio (stable P95 0) fails"


def test_bounds_come_from_the_issue_and_the_slo() -> None:
    assert MAX_P95_RATIO == 1.2
    assert MAX_FAILURE_RATIO == 0.001  # monitoring/rules.py AVAILABILITY_SLO 99.9 %


def test_queries_select_each_track_by_its_pod_template_hash(templates: list[dict[str, Any]]) -> None:
    latency = next(m for n, m in _metrics(templates) if n == LATENCY_TEMPLATE)["provider"]["prometheus"]["query"]
    errors = next(m for n, m in _metrics(templates) if n == ERRORS_TEMPLATE)["provider"]["prometheus"]["query"]
    assert 'rollouts_pod_template_hash="{{args.canary-hash}}"' in latency
    assert 'rollouts_pod_template_hash="{{args.stable-hash}}"' in latency
    assert 'quantile="0.95"' in latency and "stable-hash" not in errors
    for query in (latency, errors):
        assert re.search(r"and on \(\)\n.*>= \{\{args\.min-requests\}\}", query, re.S), query


def test_golden_job_runs_the_golden_program_once() -> None:
    cfg = from_stack_file("prod")
    template = next(t for t in analysis_templates(cfg) if t["metadata"]["name"] == ACCURACY_TEMPLATE)
    metric = template["spec"]["metrics"][0]
    job = metric["provider"]["job"]["spec"]
    container = job["template"]["spec"]["containers"][0]
    assert container["command"][-2:] == ["-m", "serving.canary.golden"]
    assert container["args"][container["args"].index("--max-drop") + 1] == "0.5"
    assert job["backoffLimit"] == 0 and job["template"]["spec"]["restartPolicy"] == "Never"
    assert metric["count"] == 1 and metric["failureLimit"] == 0
    assert job["template"]["spec"]["serviceAccountName"] == golden_service_account(cfg)["metadata"]["name"]
    assert container["image"] == cfg.gateway.image.ref


@pytest.mark.parametrize(
    ("phases", "expected"),
    [
        (["Inconclusive"], "Inconclusive"),
        (["Failed"], "Failed"),
        (["Successful", "Inconclusive"], "Inconclusive"),  # [no data] never reaches a third measurement
        (["Successful", "Failed"], "Failed"),
        (["Successful", "Successful"], "Running"),
        (["Successful", "Successful", "Successful"], "Successful"),
    ],
)
def test_the_templates_limits_decide_as_argo_rollouts_does(
    templates: list[dict[str, Any]], phases: list[str], expected: str
) -> None:
    """Measurement phases through the templates' own failureLimit / inconclusiveLimit / count."""
    for name, metric in _metrics(templates):
        if "prometheus" not in metric["provider"]:
            continue
        result = MetricResult(metric["name"])
        for phase in phases:
            setattr(result, phase.lower(), getattr(result, phase.lower()) + 1)
        assert assess(metric, result) == expected, (name, phases)


def test_no_data_measurements_are_inconclusive(templates: list[dict[str, Any]]) -> None:
    """EvaluateResult's rule over both conditions: an empty vector or NaN is neither."""
    for name, metric in _metrics(templates):
        if "prometheus" in metric["provider"]:
            for result in NO_DATA:
                assert AnalysisRun._phase(metric, list(result)) == "Inconclusive", (name, result)


def test_args_are_substituted_everywhere_and_unknown_ones_refused(templates: list[dict[str, Any]]) -> None:
    metric = next(m for n, m in _metrics(templates) if n == ACCURACY_TEMPLATE)
    resolved = substitute(metric, {"stable-url": "a:1", "canary-url": "b:2", "model": "m"}, "golden")
    assert "{{" not in json.dumps(resolved)
    with pytest.raises(ValueError, match=r"\{\{args.model\}\} is not an argument"):
        substitute(metric, {"stable-url": "a:1", "canary-url": "b:2"}, "golden")


def test_the_golden_job_starts_after_the_last_prometheus_measurement(templates: list[dict[str, Any]]) -> None:
    """Its requests must not reach the canary while its step's latency and errors are measured."""
    golden = next(m for n, m in _metrics(templates) if n == ACCURACY_TEMPLATE)
    for name, metric in _metrics(templates):
        if "prometheus" in metric["provider"]:
            last = duration_seconds(metric["initialDelay"], name) + (metric["count"] - 1) * duration_seconds(
                metric["interval"], name
            )
            assert duration_seconds(golden["initialDelay"], "golden") > last, name
