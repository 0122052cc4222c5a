"""The drift agent on the serving lab: requests go through the real gateway to the real
tritonserver, the agent drains the gateway's drift samples and compares them with the
reference windows of model_repository/, the lab's Prometheus scrapes it (job drift-agent) and
evaluates the rules the lab's environment deploys, and Alertmanager runs the config it deploys
(both read back from deploy/serving/dev; the receivers' URLs point at a receiver in this
process, routes, grouping and `group_wait` unchanged, as in test_alerting.py).

- An unshifted replay (the reference window's own requests, rebuilt from its seed) leaves the
  share of drifted features below the alert's threshold, the alert inactive in Prometheus and
  nothing at Alertmanager, and it is never delivered.
- A shifted input distribution takes the share over the threshold, ModelInputDrift pending and
  then firing in Prometheus for each model, and Alertmanager delivers it to the receiver its
  severity names (ticket), with the model's label.

The lab's Prometheus loads the deployed rules with one line changed: the `for` of
ModelInputDrift, 15m there, is LAB_FOR here (ten rule evaluations, the rule of
tests/serving_lab/alerting.py that test_alerting.py follows too), so that the alert fires within
the test (`shorten_fors` edits that line as text, `check_shortened` asserts that nothing else
differs: expression, labels, annotations, every other rule byte for byte). The real `for` is proven by
promtool (monitoring/tests/drift_alerts.yml: pending turns firing after exactly 15 minutes);
this lab proves the real expression, labels and routing end to end.
The agent evaluates every 2 s here (its --interval; 30 s by default).
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
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from lab_fleet import deployed
from lab_fleet.drift import DriftAgentProcess
from lab_fleet.gateway import GatewayProcess
from lab_fleet.serving import DRIFT_JOB, SCRAPE_INTERVAL_S, ServingLab
from model_repo_check.tritonserver.processes import free_port, http_ok, wait_for
from model_repo_check.tritonserver.server import REPO
from serving.drift.build_reference import unshifted_inputs
from serving.drift.reference import REFERENCE_FILE
from serving.drift.settings import DRIFT_SHARE, WINDOW
from tests.serving_lab.alerting import (
    WebhookReceiver,
    active_alerts,
    alerting_rules,
    check_shortened,
    lab_for,
    rule_index,
    seconds,
    shorten_fors,
)

pytestmark = pytest.mark.serving_lab

MODELS = ("text-classifier", "image-preprocess")
ALERT = "ModelInputDrift"
AGENT_INTERVAL_S = 2
# One agent round (two Evidently runs on this 2-core machine), a scrape, a rule evaluation.
SETTLE_S = 60
# The `for` of ALERT in the lab's rule file (see the module's docstring): 20 s.
LAB_FOR = lab_for(SCRAPE_INTERVAL_S)
# The project's Alertmanager waits this long before a new group's first notification.
GROUP_WAIT_S = seconds(deployed.alertmanager()[0]["route"].get("group_wait", "30s"))
PROJECT = deployed.rules_text()  # the deployed PrometheusRule's groups, as a rule file
WEBHOOK_PREFIX = "/drift"


@dataclass
class DriftLab:
    lab: ServingLab
    rules: Path  # the lab's rule file: the project's, ALERT's `for` set to LAB_FOR
    webhook: WebhookReceiver  # the receivers of the lab's Alertmanager post here, under WEBHOOK_PREFIX
    gateway: GatewayProcess
    agent: DriftAgentProcess


@dataclass
class Feed:
    began: float  # time.time() when the first request was sent
    evaluated: float  # time.time() when Prometheus had an evaluation of every window with all of them


def _drift_rule_index() -> int:
    [rule] = [rule for rule in alerting_rules(PROJECT) if rule["alert"] == ALERT]
    return rule_index(PROJECT, rule)


def _lab_rules(project: str) -> str:
    """The project's rule file with the `for` of ALERT set to LAB_FOR (tests/serving_lab/alerting.py)."""
    return shorten_fors(project, [_drift_rule_index()], LAB_FOR)


def _check_lab_rules(project: str, lab: str) -> None:
    check_shortened(project, lab, [_drift_rule_index()], LAB_FOR, SCRAPE_INTERVAL_S)


@pytest.fixture(scope="module")
def drift_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DriftLab]:
    tmp = tmp_path_factory.mktemp("drift")
    rules = tmp / "rules.yml"
    rules.write_text(_lab_rules(PROJECT))
    _check_lab_rules(PROJECT, rules.read_text())
    port = free_port()
    with WebhookReceiver() as webhook:
        _, alertmanager_config = deployed.write(tmp / "deployed", webhook.url + WEBHOOK_PREFIX)
        lab = ServingLab(
            tmp / "lab", rules=rules, alertmanager_config=alertmanager_config, drift_target=f"127.0.0.1:{port}"
        )
        try:
            lab.up()
            with (
                GatewayProcess(lab.triton.grpc_url, tmp / "gateway") as gateway,
                DriftAgentProcess(
                    gateway.url, tmp / "agent", ["--interval", str(AGENT_INTERVAL_S)], port=port
                ) as agent,
            ):
                wait_for(
                    lambda: http_ok(f"{agent.url}/readyz"), 60, "the drift agent's /readyz (it reached the gateway)"
                )
                wait_for(
                    lambda: _query(lab, f'up{{job="{DRIFT_JOB}"}} == 1') != [], 30, "Prometheus scraping the agent"
                )
                yield DriftLab(lab, rules, webhook, gateway, agent)
        finally:
            lab.down()


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def _query(lab: ServingLab, expr: str) -> list[dict[str, Any]]:
    return _get(f"{lab.prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")["data"]["result"]


def _by_model(lab: ServingLab, expr: str) -> dict[str, float]:
    return {item["metric"]["model"]: float(item["value"][1]) for item in _query(lab, expr)}


def _first_sample(lab: ServingLab, selector: str, since: float) -> dict[str, float]:
    """model -> the timestamp of the first sample of `selector` since `since` (time.time())."""
    span = f"{int(time.time() - since) + 1}s"
    return {item["metric"]["model"]: float(item["values"][0][0]) for item in _query(lab, f"{selector}[{span}]")}


def _alert_states(lab: ServingLab) -> dict[str, str]:
    """model -> state (pending or firing) of ALERT in Prometheus' rules API."""
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


def _feed(drift_lab: DriftLab, requests: dict[str, list[dict[str, np.ndarray]]]) -> Feed:
    """Send every model's requests; wait until Prometheus has an evaluation of each model's window
    that includes all of them."""
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
    return Feed(began, time.time())


@pytest.fixture(scope="module")
def replay(drift_lab: DriftLab) -> Feed:
    """The unshifted replay, fed once before anything else is fed to the lab."""
    return _feed(drift_lab, {model: _reference_replay(model) for model in MODELS})


def test_the_alert_rule_is_the_drift_share_threshold() -> None:
    rules = [rule for rule in alerting_rules(PROJECT) if rule["alert"] == ALERT]
    assert len(rules) == 1
    assert rules[0]["expr"] == f"model_drift_drifted_features_share >= {DRIFT_SHARE:g}"
    assert seconds(rules[0]["for"]) >= 5 * 60, "the test's reasoning assumes a `for` it cannot wait out"


def test_the_labs_rule_file_is_the_projects_but_for_the_drift_alerts_for() -> None:
    """Only the `for` of ALERT is shortened in the lab: the lab's proof is about the real
    expression, labels, annotations and routes, promtool's about the real `for`."""
    _check_lab_rules(PROJECT, _lab_rules(PROJECT))


def test_an_unshifted_replay_of_the_reference_crosses_nothing(drift_lab: DriftLab, replay: Feed) -> None:
    lab = drift_lab.lab
    share = _by_model(lab, "model_drift_drifted_features_share")
    rows = _by_model(lab, "model_drift_evaluated_rows")
    print(f"unshifted replay: drifted share {share}, evaluated rows {rows}")
    assert set(share) == set(MODELS)
    assert all(rows[model] == WINDOW for model in MODELS)
    # Never at the threshold since the replay began, never pending, nothing at Alertmanager.
    span = f"{int(time.time() - replay.began) + 1}s"
    highest = _by_model(lab, f"max_over_time(model_drift_drifted_features_share[{span}])")
    assert all(highest[model] < DRIFT_SHARE for model in MODELS), highest
    assert _query(lab, f'count_over_time(ALERTS{{alertname="{ALERT}"}}[{span}])') == []
    assert _alert_states(lab) == {}
    assert active_alerts(lab.alertmanager_url, alertname=ALERT) == []
    # That it is never delivered either is checked after the shifted feed: by then a delivery
    # caused by the replay would have come (test_a_shifted_distribution_...).


def test_a_shifted_distribution_fires_the_alert_and_alertmanager_delivers_it_to_the_ticket_receiver(
    drift_lab: DriftLab, replay: Feed
) -> None:
    lab, webhook = drift_lab.lab, drift_lab.webhook
    [rule] = [rule for rule in alerting_rules(drift_lab.rules) if rule["alert"] == ALERT]
    for_s, severity = seconds(rule["for"]), rule["labels"]["severity"]
    shift = _feed(drift_lab, {model: _shifted(model) for model in MODELS})
    share = _by_model(lab, "model_drift_drifted_features_share")
    drifted = _by_model(lab, "model_drift_dataset_drift")
    print(f"shifted: drifted share {share}, dataset drift {drifted}")
    assert all(share[model] >= DRIFT_SHARE for model in MODELS), share
    assert all(drifted[model] == 1 for model in MODELS), drifted

    # Alertmanager: each model in its own group (group_by has model), after the project's group_wait.
    wait_for(
        lambda: all(webhook.receivers_of(WEBHOOK_PREFIX, alertname=ALERT, model=model) for model in MODELS),
        for_s + GROUP_WAIT_S + 30,
        f"{ALERT} delivered for {', '.join(MODELS)}",
    )
    delivered_at = time.time()
    assert all(
        webhook.receivers_of(WEBHOOK_PREFIX, alertname=ALERT, model=model, **rule["labels"]) == {severity}
        for model in MODELS
    )

    # Prometheus: pending from the shifted feed on, firing after the lab's `for`.
    pending = _first_sample(lab, f'ALERTS{{alertname="{ALERT}", alertstate="pending"}}', replay.began)
    firing = _first_sample(lab, f'ALERTS{{alertname="{ALERT}", alertstate="firing"}}', replay.began)
    print(
        f"{ALERT}: pending {[round(pending[m] - shift.began, 1) for m in MODELS]} s after the shifted feed began, "
        f"firing {[round(firing[m] - pending[m], 1) for m in MODELS]} s later, delivered (seen) "
        f"{[round(delivered_at - firing[m], 1) for m in MODELS]} s after firing; group_wait {GROUP_WAIT_S:g} s"
    )
    assert set(pending) == set(firing) == set(MODELS)
    assert all(
        shift.began <= pending[m] and for_s <= firing[m] - pending[m] <= for_s + 2 * SCRAPE_INTERVAL_S for m in MODELS
    )
    assert _alert_states(lab) == dict.fromkeys(MODELS, "firing")

    # Every delivery of ALERT is the firing of an alert that went pending after the shift began
    # (its startsAt is Prometheus' first firing evaluation), to the severity's receiver: the
    # replay caused none, and since the replay was evaluated long enough has passed for a
    # delivery it caused to have come (its `for`, an evaluation, group_wait).
    assert delivered_at - replay.evaluated >= for_s + 2 * SCRAPE_INTERVAL_S + GROUP_WAIT_S
    deliveries = [(to, alert) for to, alert in webhook.alerts(WEBHOOK_PREFIX) if alert["labels"]["alertname"] == ALERT]
    assert {alert["labels"]["model"] for _, alert in deliveries} == set(MODELS)
    for receiver, alert in deliveries:
        assert receiver == severity and alert["status"] == "firing", (receiver, alert)
        started = datetime.fromisoformat(alert["startsAt"]).timestamp()
        assert abs(started - firing[alert["labels"]["model"]]) < 0.01, (started, firing, alert)
