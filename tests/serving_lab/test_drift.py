"""The drift agent on the serving lab: requests go through the real gateway to the real
tritonserver, the agent drains the gateway's drift samples and compares them with the
reference windows of model_repository/, the lab's Prometheus scrapes it (job drift-agent) and
evaluates the project's rule file, and Alertmanager runs the project's routes.

- An unshifted replay (the reference window's own requests, rebuilt from its seed) leaves the
  share of drifted features below the alert's threshold, the alert inactive in Prometheus and
  nothing at Alertmanager.
- A shifted input distribution takes the share over the threshold and puts ModelInputDrift in
  Prometheus' `pending` state for each model. The rule's `for` (15m, serving/drift/README.md)
  is not waited out here: promtool's cases (monitoring/tests/drift_alerts.yml) prove pending
  turns firing after it, and test_alerting.py that Alertmanager delivers the alert to the
  receiver its severity names.
The agent evaluates every 2 s here (its --interval; 30 s by default); rule and `for` unchanged.
"""

from __future__ import annotations

import base64
import csv
import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import pytest

from lab_fleet.drift import DriftAgentProcess
from lab_fleet.gateway import GatewayProcess
from lab_fleet.processes import free_port, http_ok, wait_for
from lab_fleet.serving import DEFAULT_RULES, DRIFT_JOB, SCRAPE_INTERVAL_S, ServingLab
from lab_fleet.triton import REPO
from serving.drift.build_reference import unshifted_inputs
from serving.drift.reference import REFERENCE_FILE
from serving.drift.settings import DRIFT_SHARE, WINDOW
from tests.serving_lab.alerting import active_alerts, alerting_rules, seconds

pytestmark = pytest.mark.serving_lab

MODELS = ("text-classifier", "image-preprocess")
ALERT = "ModelInputDrift"
AGENT_INTERVAL_S = 2
# One agent round (two Evidently runs on this 2-core machine), a scrape, a rule evaluation.
SETTLE_S = 60


@dataclass
class DriftLab:
    lab: ServingLab
    gateway: GatewayProcess
    agent: DriftAgentProcess


@pytest.fixture(scope="module")
def drift_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DriftLab]:
    tmp = tmp_path_factory.mktemp("drift")
    port = free_port()
    lab = ServingLab(tmp / "lab", drift_target=f"127.0.0.1:{port}")
    try:
        lab.up()
        with (
            GatewayProcess(lab.triton.grpc_url, tmp / "gateway") as gateway,
            DriftAgentProcess(gateway.url, tmp / "agent", ["--interval", str(AGENT_INTERVAL_S)], port=port) as agent,
        ):
            wait_for(lambda: http_ok(f"{agent.url}/readyz"), 60, "the drift agent's /readyz (it reached the gateway)")
            wait_for(lambda: _query(lab, f'up{{job="{DRIFT_JOB}"}} == 1') != [], 30, "Prometheus scraping the agent")
            yield DriftLab(lab, gateway, agent)
    finally:
        lab.down()


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def _query(lab: ServingLab, expr: str) -> list[dict[str, Any]]:
    return _get(f"{lab.prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")["data"]["result"]


def _by_model(lab: ServingLab, expr: str) -> dict[str, float]:
    return {item["metric"]["model"]: float(item["value"][1]) for item in _query(lab, expr)}


def _alert_states(lab: ServingLab) -> dict[str, str]:
    """model -> state (pending or firing) of ModelInputDrift in Prometheus' rules API."""
    groups = _get(f"{lab.prometheus_url}/api/v1/rules?type=alert")["data"]["groups"]
    rules = [rule for group in groups for rule in group["rules"] if rule["name"] == ALERT]
    assert len(rules) == 1, f"the lab's Prometheus has {len(rules)} rules named {ALERT}"
    return {alert["labels"]["model"]: alert["state"] for alert in rules[0]["alerts"]}


def _body(model: str, inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    if model == "text-classifier":
        return {"embedding": inputs["embedding"].tolist()}
    return {"image": base64.b64encode(inputs["image"].tobytes()).decode()}


def _send(gateway: GatewayProcess, model: str, requests: list[dict[str, np.ndarray]]) -> None:
    with httpx.Client(base_url=gateway.url, timeout=30) as client:

        def post(inputs: dict[str, np.ndarray]) -> int:
            return client.post(f"/v1/{model}", json=_body(model, inputs)).status_code

        with ThreadPoolExecutor(4) as pool:
            statuses = list(pool.map(post, requests))
    assert statuses == [200] * len(requests), f"{model}: the gateway refused some requests: {set(statuses)}"


def _reference_replay(model: str) -> list[dict[str, np.ndarray]]:
    """The reference window's first WINDOW requests, rebuilt from its seed; for the embedding
    model also checked against the committed file (the replay is that window, not a look-alike)."""
    requests = list(unshifted_inputs(model, WINDOW))
    if model == "text-classifier":
        with (REPO / "model_repository" / model / REFERENCE_FILE).open(newline="") as handle:
            rows = [[float(cell) for cell in row] for row in list(csv.reader(handle))[1 : WINDOW + 1]]
        rebuilt = np.array([inputs["embedding"] for inputs in requests])
        assert np.array_equal(rebuilt, np.array(rows, dtype=np.float32))
    return requests


def _shifted(model: str) -> list[dict[str, np.ndarray]]:
    """Inputs from another distribution: embeddings moved by +0.5 and 1.5x wider; darker,
    lower-contrast images (8-bit values below 200 instead of below 256)."""
    rng = np.random.default_rng(404)
    if model == "text-classifier":
        return [{"embedding": (rng.standard_normal(32) * 1.5 + 0.5).astype(np.float32)} for _ in range(WINDOW)]
    return [{"image": rng.integers(0, 200, (224, 224, 3), dtype=np.uint8)} for _ in range(WINDOW)]


def _feed(drift_lab: DriftLab, requests: dict[str, list[dict[str, np.ndarray]]]) -> float:
    """Send every model's requests; wait until Prometheus has an evaluation of each model's window
    that includes all of them. Returns the time.time() at which the feed began."""
    lab = drift_lab.lab
    began = time.time()
    before = _by_model(lab, "model_drift_samples_total")
    for model, batch in requests.items():
        _send(drift_lab.gateway, model, batch)

    def evaluated() -> bool:
        samples = _by_model(lab, "model_drift_last_evaluation_samples")
        return all(samples.get(model, 0) >= before[model] + len(batch) for model, batch in requests.items())

    wait_for(evaluated, SETTLE_S, "an evaluation of each model's window with all the requests, in Prometheus")
    time.sleep(2 * SCRAPE_INTERVAL_S)  # and a rule evaluation on that scrape
    return began


def test_the_alert_rule_is_the_drift_share_threshold() -> None:
    rules = [rule for rule in alerting_rules(DEFAULT_RULES) if rule["alert"] == ALERT]
    assert len(rules) == 1
    assert rules[0]["expr"] == f"model_drift_drifted_features_share >= {DRIFT_SHARE:g}"
    assert seconds(rules[0]["for"]) >= 5 * 60, "the test's reasoning assumes a `for` it cannot wait out"


def test_an_unshifted_replay_of_the_reference_crosses_nothing(drift_lab: DriftLab) -> None:
    lab = drift_lab.lab
    began = _feed(drift_lab, {model: _reference_replay(model) for model in MODELS})
    share = _by_model(lab, "model_drift_drifted_features_share")
    rows = _by_model(lab, "model_drift_evaluated_rows")
    print(f"unshifted replay: drifted share {share}, evaluated rows {rows}")
    assert set(share) == set(MODELS)
    assert all(rows[model] == WINDOW for model in MODELS)
    # Never at the threshold since the replay began, never pending, nothing at Alertmanager.
    span = f"{int(time.time() - began) + 1}s"
    highest = _by_model(lab, f"max_over_time(model_drift_drifted_features_share[{span}])")
    assert all(highest[model] < DRIFT_SHARE for model in MODELS), highest
    assert _query(lab, f'count_over_time(ALERTS{{alertname="{ALERT}"}}[{span}])') == []
    assert _alert_states(lab) == {}
    assert active_alerts(lab.alertmanager_url, alertname=ALERT) == []


def test_a_shifted_distribution_crosses_the_threshold_and_the_alert_goes_pending(drift_lab: DriftLab) -> None:
    lab = drift_lab.lab
    _feed(drift_lab, {model: _shifted(model) for model in MODELS})
    share = _by_model(lab, "model_drift_drifted_features_share")
    drifted = _by_model(lab, "model_drift_dataset_drift")
    print(f"shifted: drifted share {share}, dataset drift {drifted}")
    assert all(share[model] >= DRIFT_SHARE for model in MODELS), share
    assert all(drifted[model] == 1 for model in MODELS), drifted
    wait_for(
        lambda: set(_alert_states(lab)) == set(MODELS),
        2 * SCRAPE_INTERVAL_S + 5,
        f"{ALERT} pending for {', '.join(MODELS)}",
    )
    assert _alert_states(lab) == dict.fromkeys(MODELS, "pending")
