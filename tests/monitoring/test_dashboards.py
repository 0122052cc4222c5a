"""monitoring.dashboards offline: the committed JSON is what the code builds, every panel
queries with a unit, uids are stable, the Triton boards filter by model and version, and a
panel reading a metric that no exporter produces fails check() with its file and title."""

from __future__ import annotations

from pathlib import Path

import pytest
from grafana_foundation_sdk.models import units

from monitoring import dashboards
from monitoring.promql import Matcher, selectors

BOARDS = dashboards.dashboards()
# The unit each panel shows, reviewed one by one: a new panel must be added here.
UNITS = {
    "triton": {
        "Request rate": "reqps",
        "Error ratio": "percentunit",
        "Failures by reason": "reqps",
        "Request latency P50 / P95 / P99": "µs",
        "Queue time per request": "µs",
    },
    "triton-batching": {
        "Batch size achieved": "short",
        "Executions per second": "ops",
        "Queue vs compute time per request": "µs",
        "Pending requests": "short",
        "Busy instances": "short",
        "Queue share of request time": "percentunit",
    },
    "gpu-health": {
        "GPU utilisation": "percent",  # DCGM_FI_DEV_GPU_UTIL is 0-100
        "Framebuffer used": "mbytes",  # DCGM_FI_DEV_FB_* are MiB
        "Power draw": "watt",
        "Temperature": "celsius",
        "XID errors": "short",  # occurrences in the exporter's count window
        "ECC: remapped rows": "short",
    },
    "gateway": {
        "Requests by code": "reqps",
        "5xx ratio": "percentunit",
        "Error budget left": "percentunit",
        "Latency at the gateway": "s",
        "Triton call against the whole request": "s",
        "In flight": "short",
        "Rejections": "reqps",
        "Gateways that find Triton ready": "short",
        "Gateways that find the model ready": "short",
    },
    "cgroup-limiter": {
        "Pod IO rate and limit": "Bps",
        "Throttled pods": "short",
        "Throttle transitions": "ops",
        "CPU max applied": "short",
        "Scan duration P99": "s",
        "Time since the last scan": "s",
        "Pod cgroups": "short",
        "Errors and writes": "ops",
    },
}
GRAFANA_UNITS = {value for name, value in vars(units).items() if not name.startswith("_") and isinstance(value, str)}


def test_the_committed_json_is_what_build_writes(tmp_path: Path) -> None:
    written = dashboards.build(tmp_path)
    assert sorted(path.name for path in written) == sorted(path.name for path in dashboards.GENERATED.glob("*.json"))
    for path in written:
        assert path.read_bytes() == (dashboards.GENERATED / path.name).read_bytes(), (
            f"{path.name} is stale: run `python -m monitoring build`"
        )
        assert path.read_text(encoding="utf-8").endswith("}\n")


def test_build_is_deterministic(tmp_path: Path) -> None:
    first = [path.read_bytes() for path in dashboards.build(tmp_path / "a")]
    assert first == [path.read_bytes() for path in dashboards.build(tmp_path / "b")]


def test_check_passes_on_the_committed_tree() -> None:
    assert dashboards.check() == []


@pytest.mark.parametrize("stem", sorted(BOARDS))
def test_every_panel_queries_with_a_reviewed_unit(stem: str) -> None:
    board = BOARDS[stem]
    titles = []
    for panel in dashboards.panels(board):
        titles.append(panel["title"])
        assert panel["targets"], f"{stem}: panel {panel['title']!r} has no query"
        assert all(target["expr"].strip() for target in panel["targets"])
        assert len({target["refId"] for target in panel["targets"]}) == len(panel["targets"])
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        unit = panel["fieldConfig"]["defaults"].get("unit")
        assert unit in GRAFANA_UNITS, f"{stem}: panel {panel['title']!r} has no Grafana unit ({unit!r})"
        assert UNITS[stem].get(panel["title"]) == unit, f"{stem}: panel {panel['title']!r} shows {unit!r}"
    assert sorted(titles) == sorted(UNITS[stem])


def test_uids_are_stable_and_panel_ids_unique() -> None:
    # gpu-serving-triton is the uid of the hand-written dashboard these replace: links keep working.
    assert {stem: board["uid"] for stem, board in BOARDS.items()} == {
        "triton": "gpu-serving-triton",
        "triton-batching": "gpu-serving-triton-batching",
        "gpu-health": "gpu-serving-gpu-health",
        "cgroup-limiter": "gpu-serving-cgroup-limiter",
        "gateway": "gpu-serving-gateway",
    }
    for board in BOARDS.values():
        assert len(board["uid"]) <= 40  # Grafana's limit
        ids = [panel["id"] for panel in board["panels"]]
        assert len(ids) == len(set(ids))


def _variables(board: dict) -> dict[str, dict]:
    return {variable["name"]: variable for variable in board["templating"]["list"]}


@pytest.mark.parametrize("stem", ["triton", "triton-batching"])
def test_triton_boards_filter_every_selector_by_model_and_version(stem: str) -> None:
    variables = _variables(BOARDS[stem])
    assert list(variables) == ["datasource", "model", "version"]
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("model", "version"):
        assert variables[name]["type"] == "query" and variables[name]["multi"] and variables[name]["includeAll"]
        assert variables[name]["allValue"] == ".*"
    assert "$model" in variables["version"]["query"], "the versions offered follow the models chosen"
    for panel in dashboards.panels(BOARDS[stem]):
        for target in panel["targets"]:
            for selector in selectors(target["expr"]):
                assert {Matcher("model", "=~", "$model"), Matcher("version", "=~", "$version")} <= set(
                    selector.matchers
                ), f"{stem}: panel {panel['title']!r}: {selector.name} is not filtered by $model and $version"


@pytest.mark.parametrize(("stem", "metric"), [("gpu-health", "DCGM_FI_DEV_"), ("cgroup-limiter", "cgroup_limiter_")])
def test_node_boards_filter_by_node(stem: str, metric: str) -> None:
    variables = _variables(BOARDS[stem])
    assert list(variables) == ["datasource", "node"]
    assert variables["node"]["query"].startswith(f"label_values({metric}")
    for panel in dashboards.panels(BOARDS[stem]):
        for target in panel["targets"]:
            assert target["expr"].count(metric) == target["expr"].count('{node=~"$node"}'), panel["title"]


def test_a_panel_reading_a_metric_no_exporter_produces_fails_check(monkeypatch: pytest.MonkeyPatch) -> None:
    board = dashboards.dashboards()["triton"]
    panel = next(dashboards.panels(board))
    panel["targets"].append({"refId": "Z", "expr": 'sum(rate(nv_inference_requests_total{model=~"$model"}[5m]))'})
    monkeypatch.setattr(dashboards, "dashboards", lambda: {"triton": board})
    problems = dashboards.check()
    assert (
        "monitoring/generated/dashboards/triton.json: panel 'Request rate': "
        "nv_inference_requests_total is produced by no exporter, rule or Prometheus"
    ) in problems
    assert "monitoring/generated/dashboards/triton.json: out of date; run `python -m monitoring build`" in problems


def test_an_unreadable_panel_query_fails_check(monkeypatch: pytest.MonkeyPatch) -> None:
    board = dashboards.dashboards()["gpu-health"]
    next(dashboards.panels(board))["targets"][0]["expr"] = 'DCGM_FI_DEV_GPU_TEMP{node="a}'
    monkeypatch.setattr(dashboards, "dashboards", lambda: {"gpu-health": board})
    assert any(
        line.startswith("monitoring/generated/dashboards/gpu-health.json: panel 'GPU utilisation': cannot read")
        for line in dashboards.check()
    )
