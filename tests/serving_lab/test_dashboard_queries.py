"""Every recording rule and every dashboard panel returns data from the lab's Prometheus while perf_analyzer loads every
example model version and requests go through the lab's gateway, with the template variables set to that model and
version; and the recorded Triton scrape (tests/monitoring/fixtures) still has the live server's metric names.

Panels that read the DCGM exporter (a GPU node) or the cgroup limiter (a node agent) cannot
have data here: they are skipped, each with that reason, and every other panel must not be empty.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator

import httpx
import numpy as np
import pytest
import yaml

from lab_fleet.gateway import GatewayProcess
from lab_fleet.serving import ServingLab
from monitoring import dashboards, metric_names
from monitoring.build import RULE_FILE
from monitoring.promql import metric_names as names_in
from monitoring.triton_scrape import ready_versions, scrape

pytestmark = pytest.mark.serving_lab

LOAD_SECONDS = 45
# Grafana's $__rate_interval is at least four scrape intervals (8 s in the lab); 30 s leaves
# room for a scrape missed on a busy machine.
RATE_INTERVAL = "30s"
NEEDS = {
    "DCGM exporter (counters.csv)": "needs a GPU node: the DCGM exporter runs only there",
    "cgroup limiter": "needs the cgroup limiter running on a node: the serving lab runs no limiter",
}
CATALOG = metric_names.catalog()
BOARDS = dashboards.dashboards()
PANELS = [(stem, panel) for stem, board in sorted(BOARDS.items()) for panel in dashboards.panels(board)]

Versions = list[tuple[str, str]]
Results = dict[tuple[str, str], list[str]]  # (stem, title) -> the empty queries


def _skip_reason(panel: dict) -> str | None:
    sources = {CATALOG.sources[name] for target in panel["targets"] for name in names_in(target["expr"])}
    return next((reason for source, reason in NEEDS.items() if source in sources), None)


def _query(prometheus: str, expr: str) -> list[dict]:
    url = f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=30) as response:
        body = json.load(response)
    assert body["status"] == "success", f"{expr}: {body}"
    return body["data"]["result"]


def _substitute(expr: str, model: str, version: str) -> str:
    return expr.replace("$model", model).replace("$version", version).replace("$__rate_interval", RATE_INTERVAL)


def _missing_records(lab: ServingLab, versions: Versions) -> list[str]:
    """The records of the rule file without a series: per model version for `model_version*`
    records, at all for the others."""
    groups = yaml.safe_load(RULE_FILE.read_text(encoding="utf-8"))["groups"]
    records = [rule["record"] for group in groups for rule in group["rules"] if "record" in rule]
    assert records, f"{RULE_FILE} has no recording rule"
    missing = []
    for record in records:
        series = _query(lab.prometheus_url, record)
        if record.startswith("model_version"):
            seen = {(s["metric"].get("model"), s["metric"].get("version")) for s in series}
            missing += [f"{record}: no series for {m} v{v}" for m, v in versions if (m, v) not in seen]
        elif not series:
            missing.append(f"{record}: no series")
    return missing


def _through_the_gateway(gateway: GatewayProcess, seconds: float) -> None:
    """Business requests for both example models, one at a time, for `seconds`."""
    rng = np.random.default_rng(7)
    bodies = {
        "text-classifier": lambda: {"embedding": rng.standard_normal(32).tolist()},
        "image-preprocess": lambda: {
            "image": base64.b64encode(rng.integers(0, 256, (224, 224, 3), dtype=np.uint8).tobytes()).decode()
        },
    }
    deadline = time.monotonic() + seconds
    with httpx.Client(base_url=gateway.url, timeout=10) as client:
        while time.monotonic() < deadline:
            for model, body in bodies.items():
                response = client.post(f"/v1/{model}", json=body())
                assert response.status_code == 200, f"{model}: {response.status_code} {response.text}"


@pytest.fixture(scope="module")
def loaded_lab(
    serving_lab: ServingLab, lab_gateway: GatewayProcess, load: Callable[..., object]
) -> Iterator[tuple[ServingLab, Versions]]:
    """perf_analyzer on every ready model version, and requests through the lab's gateway, in the
    background, for LOAD_SECONDS; yields once the recording rules have data for every version
    (the load still running)."""
    versions = ready_versions(serving_lab.triton.http_url)
    assert versions, "Triton reports no ready model version"
    failures: list[BaseException] = []

    def drive(model: str, version: str) -> None:
        try:
            load(serving_lab.triton, model, LOAD_SECONDS, "-x", version)
        except BaseException as exc:  # surfaced after the join
            failures.append(exc)

    def through_the_gateway() -> None:
        try:
            _through_the_gateway(lab_gateway, LOAD_SECONDS)
        except BaseException as exc:  # surfaced after the join
            failures.append(exc)

    threads = [threading.Thread(target=drive, args=pair, daemon=True) for pair in versions]
    threads.append(threading.Thread(target=through_the_gateway, daemon=True))
    for thread in threads:
        thread.start()
    # Rule groups evaluate independently, each at its own offset in the interval: the first
    # group's records can exist a whole interval before another's. Wait for every record, so
    # the panels are queried once the rule file has caught up with the load.
    deadline = time.monotonic() + LOAD_SECONDS
    while _missing_records(serving_lab, versions) and time.monotonic() < deadline:
        time.sleep(1)
    yield serving_lab, versions
    for thread in threads:
        thread.join(LOAD_SECONDS * 3 + 120)
    assert not failures, failures


@pytest.fixture(scope="module")
def results(loaded_lab: tuple[ServingLab, Versions]) -> Results:
    """Every query of every panel that can have data here, for every model version."""
    lab, versions = loaded_lab
    empty: Results = {}
    for stem, panel in PANELS:
        if _skip_reason(panel):
            continue
        empty[stem, panel["title"]] = [
            f"{model} v{version} {target['refId']}: {_substitute(target['expr'], model, version)}"
            for model, version in versions
            for target in panel["targets"]
            if not _query(lab.prometheus_url, _substitute(target["expr"], model, version))
        ]
    return empty


@pytest.mark.parametrize(("stem", "panel"), PANELS, ids=[f"{stem}:{panel['title']}" for stem, panel in PANELS])
def test_every_panel_has_data_under_load(stem: str, panel: dict, results: Results) -> None:
    reason = _skip_reason(panel)
    if reason:
        pytest.skip(f"{stem}.json panel {panel['title']!r} {reason}")
    assert results[stem, panel["title"]] == [], f"{stem}.json panel {panel['title']!r} has no data"


@pytest.mark.parametrize("stem", ["triton", "triton-batching"])
def test_the_model_and_version_variables_offer_every_loaded_version(
    stem: str, loaded_lab: tuple[ServingLab, Versions]
) -> None:
    """Each query variable (`label_values(<selector>, <label>)`) run as Grafana runs it: the
    label's values over the series the selector matches, $model set to the model chosen."""
    lab, versions = loaded_lab
    variables = {v["name"]: v for v in BOARDS[stem]["templating"]["list"] if v["type"] == "query"}
    for model, version in versions:
        for name, wanted in (("model", model), ("version", version)):
            selector, label = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", variables[name]["query"]).groups()
            match = urllib.parse.urlencode({"match[]": _substitute(selector, model, version)})
            with urllib.request.urlopen(f"{lab.prometheus_url}/api/v1/label/{label}/values?{match}") as response:
                offered = json.load(response)["data"]
            assert wanted in offered, f"{stem}.json variable {name!r} offers {offered}, not {wanted}"


def test_the_recorded_triton_scrape_still_has_the_live_names(loaded_lab: tuple[ServingLab, Versions]) -> None:
    lab, _ = loaded_lab
    live = metric_names.exposition_names(scrape(lab.triton.metrics_url))
    recorded = metric_names.triton()
    assert live == recorded, (
        f"only live: {sorted(live - recorded)}; only recorded: {sorted(recorded - live)}: "
        "run `python -m monitoring.triton_scrape` and review the dashboards and rules"
    )


def test_every_recording_rule_has_data_for_every_loaded_version(loaded_lab: tuple[ServingLab, Versions]) -> None:
    """Each record of monitoring/generated/rules.yml, evaluated by the lab's Prometheus under
    load: a `model_version*` record has a series for every loaded model version, any other
    record (the HPA's per-pod metric) has at least one series."""
    lab, versions = loaded_lab
    missing = _missing_records(lab, versions)
    assert not missing, f"{RULE_FILE.name}, {LOAD_SECONDS} s into the load:\n" + "\n".join(missing)
