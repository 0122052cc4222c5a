"""The lab proofs of the monitoring: the rules that the lab's environment deploys fire on a real
Triton, and the Alertmanager config it deploys delivers each alert to the receiver its severity
names, and the Watchdog heartbeat to the heartbeat receiver, every minute. Both are read back from
deploy/serving/dev (lab_fleet/deployed.py), as a cluster gets them.

Two labs run side by side so that the waits overlap: one serves model_repository/ plus a model
whose backend raises (tests/serving_lab/models) under a steady stream of requests, the other has
its tritonserver stopped. Both Alertmanagers run the deployed config, the receivers' Secret
holding URLs of a webhook receiver in this process (routes, grouping and inhibitions unchanged).
Alert names and `for` durations are read from the deployed PrometheusRule. Both labs load it
with the `for` of the two alerts awaited here (the quickest Triton-down and error-ratio rules, 1m
and 2m there) set to LAB_FOR, ten rule evaluations, by the rule that test_drift.py follows
(tests/serving_lab/alerting.py: one line each changed, everything else checked byte for byte);
promtool proves the project's `for` values (monitoring/tests/), the lab that the alerts wait
their `for` out, then fire and are routed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from lab_fleet import deployed
from lab_fleet.serving import SCRAPE_INTERVAL_S, ServingLab
from model_repo_check.tritonserver.processes import wait_for
from model_repo_check.tritonserver.server import TritonProcess
from monitoring import spec
from tests.serving_lab.alerting import (
    WebhookReceiver,
    alerting_rules,
    check_shortened,
    error_ratio_rule,
    first_seen,
    lab_for,
    post_alerts,
    rule_index,
    seconds,
    shorten_fors,
    triton_down_rule,
)

pytestmark = pytest.mark.serving_lab

TEST_MODELS = Path(__file__).resolve().parent / "models"
FAILING_MODEL = "always-fails"
# Polling Alertmanager (every 0.2 s) and the hop from Prometheus to Alertmanager.
SLACK_S = 1.0
CONFIG, _ = deployed.alertmanager()
PROJECT = deployed.rules_text()  # the deployed PrometheusRule's groups, as a rule file
GROUP_WAIT_S = seconds(CONFIG["route"].get("group_wait", "30s"))
# The alerts these tests wait for (their index among the alerting rules) and their lab `for`: 20 s.
DOWN = rule_index(PROJECT, triton_down_rule(PROJECT))
ERROR = rule_index(PROJECT, error_ratio_rule(PROJECT))
LAB_FOR = lab_for(SCRAPE_INTERVAL_S)


class FailingRequests:
    """Sends an inference request to the failing model every 0.1 s in a thread; counts the errors."""

    def __init__(self, triton: TritonProcess) -> None:
        self.triton = triton
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with grpcclient.InferenceServerClient(self.triton.grpc_url) as client:
            tensor = grpcclient.InferInput("x", [1], "FP32")
            tensor.set_data_from_numpy(np.zeros(1, dtype=np.float32))
            while not self._stop.wait(0.1):
                try:
                    client.infer(FAILING_MODEL, [tensor])
                except InferenceServerException:
                    self.errors += 1

    def __enter__(self) -> FailingRequests:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Labs:
    rules: Path  # the labs' rule file: the project's, the `for` of DOWN and ERROR set to LAB_FOR
    webhook: WebhookReceiver
    failing: ServingLab  # serves the failing model, under FailingRequests since `errors_from`
    errors_from: float
    requests: FailingRequests
    error_seen: dict[str, float]
    stopped: ServingLab  # its tritonserver was stopped: SIGTERM at `term`, gone at `gone`
    term: float
    gone: float
    down_seen: dict[str, float]


def _lab(run_dir: Path, rules: Path, webhook: WebhookReceiver, name: str, **kwargs: object) -> ServingLab:
    run_dir.mkdir(parents=True)
    _, config = deployed.write(run_dir / "deployed", f"{webhook.url}/{name}")
    return ServingLab(run_dir / "run", rules=rules, alertmanager_config=config, **kwargs)


@pytest.fixture(scope="module")
def labs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Labs]:
    tmp = tmp_path_factory.mktemp("alerting")
    rules = tmp / "rules.yml"
    rules.write_text(shorten_fors(PROJECT, [DOWN, ERROR], LAB_FOR))
    check_shortened(PROJECT, rules.read_text(), [DOWN, ERROR], LAB_FOR, SCRAPE_INTERVAL_S)
    error_alert = alerting_rules(rules)[ERROR]["alert"]
    down_alert = alerting_rules(rules)[DOWN]["alert"]
    with WebhookReceiver() as webhook:
        failing = _lab(tmp / "failing", rules, webhook, "failing", triton_args=[f"--model-repository={TEST_MODELS}"])
        stopped = _lab(tmp / "stopped", rules, webhook, "stopped")
        try:
            failing.up()
            with (
                first_seen(failing.alertmanager_url, alertname=error_alert, model=FAILING_MODEL) as error_seen,
                FailingRequests(failing.triton) as requests,
            ):
                errors_from = time.monotonic()
                stopped.up()
                with first_seen(stopped.alertmanager_url, alertname=down_alert) as down_seen:
                    term = time.monotonic()
                    stopped.triton.stop()
                    gone = time.monotonic()
                    yield Labs(
                        rules, webhook, failing, errors_from, requests, error_seen, stopped, term, gone, down_seen
                    )
        finally:
            stopped.down()
            failing.down()


def test_the_labs_rule_file_is_the_projects_but_for_the_awaited_alerts_for() -> None:
    """Only the `for` of the two awaited alerts is shortened, to ten evaluations: the lab proves
    their real expression, labels, annotations and routes, promtool their real `for`."""
    assert DOWN != ERROR
    check_shortened(PROJECT, shorten_fors(PROJECT, [DOWN, ERROR], LAB_FOR), [DOWN, ERROR], LAB_FOR, SCRAPE_INTERVAL_S)


def test_routes_deliver_every_alert_of_the_rule_file_to_its_severitys_receiver(labs: Labs) -> None:
    """One alert per alerting rule (its own labels, its own `cluster`, so that nothing groups or
    inhibits across them) posted to Alertmanager must reach the receiver named like its severity,
    and only that one (Watchdog: the heartbeat receiver); an alert without a severity reaches the
    root route's receiver."""
    receivers = {receiver["name"] for receiver in CONFIG["receivers"]}
    expected: dict[str, str] = {}
    alerts = []
    for index, rule in enumerate(alerting_rules(PROJECT)):
        severity = rule.get("labels", {}).get("severity")
        receiver = "heartbeat" if rule["alert"] == spec.HEARTBEAT_ALERT else severity
        assert receiver in receivers, f"{rule['alert']}: severity {severity!r} names no receiver of {receivers}"
        cluster = f"route-test-{index}"
        alerts.append({**rule.get("labels", {}), "alertname": rule["alert"], "cluster": cluster})
        expected[cluster] = receiver
    alerts.append({"alertname": "ServingLabNoSeverity", "cluster": "route-test-none"})
    expected["route-test-none"] = CONFIG["route"]["receiver"]
    post_alerts(labs.failing.alertmanager_url, alerts)

    def delivered() -> dict[str, set[str]]:
        return {cluster: labs.webhook.receivers_of("/failing", cluster=cluster) for cluster in expected}

    wait_for(lambda: all(delivered().values()), GROUP_WAIT_S + 15, "a webhook delivery of every posted alert")
    time.sleep(1)  # a wrong second delivery would come with the first batch
    assert delivered() == {cluster: {receiver} for cluster, receiver in expected.items()}


def test_stopping_triton_fires_the_triton_down_alert_in_time(labs: Labs) -> None:
    """Not before its `for` has passed since tritonserver exited (the `for` holds it back), and
    within that `for` plus two scrape intervals (the scrape that sees it down, an evaluation)."""
    rule = alerting_rules(labs.rules)[DOWN]
    for_s = seconds(rule.get("for"))
    bound = for_s + 2 * SCRAPE_INTERVAL_S
    wait_for(lambda: "at" in labs.down_seen, labs.gone + bound + 30 - time.monotonic(), f"{rule['alert']} firing")
    after_exit = labs.down_seen["at"] - labs.gone
    print(
        f"{rule['alert']} at Alertmanager {after_exit:.1f} s after tritonserver exited "
        f"({labs.down_seen['at'] - labs.term:.1f} s after SIGTERM); bound for + 2 scrapes = {bound:g} s"
    )
    assert for_s <= after_exit <= bound + SLACK_S
    severity = rule["labels"]["severity"]
    wait_for(
        lambda: labs.webhook.receivers_of("/stopped", alertname=rule["alert"]) == {severity},
        GROUP_WAIT_S + 15,
        f"{rule['alert']} delivered to receiver {severity}",
    )


def test_a_failing_model_fires_the_error_ratio_alert(labs: Labs) -> None:
    rule = alerting_rules(labs.rules)[ERROR]
    for_s = seconds(rule.get("for"))
    # Two scrapes before rate() has a value, one evaluation of the recording rule, one of the alert.
    bound = for_s + 4 * SCRAPE_INTERVAL_S
    wait_for(lambda: "at" in labs.error_seen, labs.errors_from + bound + 30 - time.monotonic(), f"{rule['alert']}")
    after_errors = labs.error_seen["at"] - labs.errors_from
    print(f"{rule['alert']} at Alertmanager {after_errors:.1f} s after the failing requests began; bound {bound:g} s")
    assert labs.requests.errors > 0
    assert for_s <= after_errors <= bound + SLACK_S
    severity = rule["labels"]["severity"]
    wait_for(
        lambda: labs.webhook.receivers_of("/failing", alertname=rule["alert"], model=FAILING_MODEL) == {severity},
        GROUP_WAIT_S + 15,
        f"{rule['alert']} for {FAILING_MODEL} delivered to receiver {severity}",
    )


def test_the_watchdog_heartbeat_reaches_the_heartbeat_receiver_every_minute(labs: Labs) -> None:
    """The lab's own Prometheus fires Watchdog from its first evaluation; Alertmanager sends it
    to the environment's heartbeat receiver and to no other, then again after the heartbeat
    route's repeat interval, with or without Triton."""
    route = next(route for route in CONFIG["route"]["routes"] if route["receiver"] == "heartbeat")
    repeat_s = seconds(route["group_interval"]) + seconds(route["repeat_interval"])

    def beats() -> int:
        """Watchdog notifications so far (each carries the one Watchdog alert)."""
        alerts = labs.webhook.alerts("/stopped")
        return sum(alert["labels"]["alertname"] == spec.HEARTBEAT_ALERT for _, alert in alerts)

    wait_for(lambda: beats() > 0, GROUP_WAIT_S + 30, "a first Watchdog delivery")
    assert labs.webhook.receivers_of("/stopped", alertname=spec.HEARTBEAT_ALERT) == {"heartbeat"}
    first = beats()
    wait_for(lambda: beats() > first, repeat_s + 15, "a second Watchdog delivery, one repeat interval later")
    assert labs.webhook.receivers_of("/stopped", alertname=spec.HEARTBEAT_ALERT) == {"heartbeat"}
