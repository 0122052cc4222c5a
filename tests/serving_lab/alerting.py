"""Helpers of the alerting proofs: the rule file read as data, the lab's copy of it with some
alerts' `for` shortened (one derived value, checked), a local webhook receiver (the receivers
of lab_fleet.deployed.write post to it), and a watch on Alertmanager's alerts."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from model_repo_check.tritonserver.processes import LOOPBACK

# A `for` shortened in the lab spans this many rule evaluations: the alert stays pending over
# several evaluations before it fires, so the lab still sees `for` hold it back (never firing
# sooner than `for` after its condition began), and waits seconds where the project's `for` is
# minutes. The project's own `for` values are proven by promtool (monitoring/tests/).
LAB_FOR_EVALUATIONS = 10

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def seconds(duration: str | None) -> float:
    """A Prometheus/Alertmanager duration ("1m", "1h30m", "500ms") in seconds; None is 0."""
    if not duration:
        return 0.0
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", duration)
    if "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"not a duration: {duration!r}")
    return sum(int(n) * _UNITS[u] for n, u in parts)


def alerting_rules(rule_file: Path | str) -> list[dict[str, Any]]:
    """The alerting rules of a rule file (a path, or the file's text)."""
    text = rule_file.read_text() if isinstance(rule_file, Path) else rule_file
    groups = yaml.safe_load(text)["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def lab_for(evaluation_interval_s: float) -> str:
    """The `for` of a shortened alert in the lab's rule file: LAB_FOR_EVALUATIONS evaluations."""
    return f"{LAB_FOR_EVALUATIONS * evaluation_interval_s:g}s"


def rule_index(rule_file: Path | str, rule: Mapping[str, Any]) -> int:
    """The position of `rule` among the file's alerting rules (several rules may share a name)."""
    rules = alerting_rules(rule_file)
    if rules.count(rule) != 1:
        where = rule_file if isinstance(rule_file, Path) else "the rule file"
        raise AssertionError(f"{where}: {rules.count(rule)} alerting rules equal to {rule.get('alert')}")
    return rules.index(rule)


def shorten_fors(project: str, shortened: Collection[int], lab_value: str) -> str:
    """The project's rule file (its text) with the `for` line of each alerting rule at an index in
    `shortened` (alerting_rules order) set to `lab_value`, edited as text so that every other byte
    stays as generated."""
    lines = project.splitlines(keepends=True)
    starts = [index for index, line in enumerate(lines) if line.lstrip().startswith("- alert: ")]
    for index in shortened:
        start = starts[index]
        keys = " " * (len(lines[start]) - len(lines[start].lstrip()) + 2)  # the indentation of the rule's keys
        end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(keys)), len(lines))
        fors = [i for i in range(start + 1, end) if lines[i].startswith(f"{keys}for: ")]
        if len(fors) != 1:
            raise AssertionError(f"alerting rule {index} ({lines[start].strip()}) has {len(fors)} `for` lines")
        lines[fors[0]] = f"{keys}for: {lab_value}\n"
    return "".join(lines)


def check_shortened(
    project: str, lab: str, shortened: Collection[int], lab_value: str, evaluation_interval_s: float
) -> None:
    """The lab's rule file is the project's but for the `for` of the alerting rules at `shortened`:
    one changed line each, `lab_value`, shorter than the project's `for` and at least
    LAB_FOR_EVALUATIONS evaluations long. Expression, labels, annotations and every other rule are
    the project's."""
    assert seconds(lab_value) >= LAB_FOR_EVALUATIONS * evaluation_interval_s, (lab_value, evaluation_interval_s)
    project_lines, lab_lines = project.splitlines(), lab.splitlines()
    assert len(lab_lines) == len(project_lines)
    changed = [new for old, new in zip(project_lines, lab_lines, strict=True) if old != new]
    assert [line.strip() for line in changed] == [f"for: {lab_value}"] * len(shortened), changed
    project_data, lab_data = yaml.safe_load(project), yaml.safe_load(lab)
    lab_rules = [rule for group in lab_data["groups"] for rule in group["rules"] if "alert" in rule]
    project_rules = [rule for group in project_data["groups"] for rule in group["rules"] if "alert" in rule]
    for index in shortened:
        assert lab_rules[index]["for"] == lab_value, lab_rules[index]
        assert seconds(lab_value) < seconds(project_rules[index].get("for")), project_rules[index]
        lab_rules[index]["for"] = project_rules[index]["for"]
    assert lab_data == project_data


def _selectors(expr: str) -> set[str]:
    """The metric names that an expression selects with label matchers (`up{...}`)."""
    return set(re.findall(r"([A-Za-z_:][\w:]*)\s*\{", expr))


def _quickest(rules: list[dict[str, Any]], what: str) -> dict[str, Any]:
    if not rules:
        raise AssertionError(f"the rule file has no {what}")
    return min(rules, key=lambda rule: seconds(rule.get("for")))


def triton_down_rule(rule_file: Path | str) -> dict[str, Any]:
    """The quickest alert on Triton's scrape target alone being down (`up{job="triton"} ... == 0`)."""
    rules = [
        rule
        for rule in alerting_rules(rule_file)
        if _selectors(rule["expr"]) == {"up"} and 'job="triton"' in rule["expr"] and "== 0" in rule["expr"]
    ]
    return _quickest(rules, "alert on Triton's up == 0")


def error_ratio_rule(rule_file: Path | str) -> dict[str, Any]:
    """The quickest alert on the ratio of failed inference requests."""
    rules = [rule for rule in alerting_rules(rule_file) if "nv_inference_request_failure" in rule["expr"]]
    return _quickest(rules, "alert on nv_inference_request_failure")


class WebhookReceiver:
    """An Alertmanager webhook endpoint on 127.0.0.1: records (path, payload) of every POST."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver._lock:
                    receiver.deliveries.append((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows failures
                pass

        self._server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self.url = f"http://{LOOPBACK}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def alerts(self, prefix: str) -> list[tuple[str, dict[str, Any]]]:
        """(receiver, alert) of every alert delivered under `prefix` (the receiver: last path part)."""
        with self._lock:
            deliveries = list(self.deliveries)
        return [
            (path.rsplit("/", 1)[1], alert)
            for path, payload in deliveries
            if path.startswith(prefix + "/")
            for alert in payload["alerts"]
        ]

    def receivers_of(self, prefix: str, **labels: str) -> set[str]:
        """The receivers under `prefix` that got a firing alert with these labels."""
        return {
            receiver
            for receiver, alert in self.alerts(prefix)
            if alert["status"] == "firing" and labels.items() <= alert["labels"].items()
        }


def active_alerts(alertmanager_url: str, **labels: str) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode([("filter", f'{k}="{v}"') for k, v in labels.items()])
    with urllib.request.urlopen(f"{alertmanager_url}/api/v2/alerts?{query}", timeout=5) as response:
        return json.load(response)


def post_alerts(alertmanager_url: str, alerts: list[Mapping[str, str]]) -> None:
    body = json.dumps([{"labels": dict(labels)} for labels in alerts]).encode()
    request = urllib.request.Request(
        f"{alertmanager_url}/api/v2/alerts", data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        response.read()


@contextmanager
def first_seen(alertmanager_url: str, **labels: str) -> Iterator[dict[str, float]]:
    """Polls Alertmanager every 0.2 s in a thread; the yielded dict gets "at" (time.monotonic())
    when an alert with these labels first appears."""
    seen: dict[str, float] = {}
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set() and "at" not in seen:
            try:
                if active_alerts(alertmanager_url, **labels):
                    seen["at"] = time.monotonic()
            except OSError:
                pass
            stop.wait(0.2)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()
