"""Helpers of the alerting proofs: the rule file read as data, a local webhook receiver, a
test copy of the Alertmanager config that delivers to it, and a watch on Alertmanager's alerts."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from serving.tritonserver.processes import LOOPBACK

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def seconds(duration: str | None) -> float:
    """A Prometheus/Alertmanager duration ("1m", "1h30m", "500ms") in seconds; None is 0."""
    if not duration:
        return 0.0
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", duration)
    if "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"not a duration: {duration!r}")
    return sum(int(n) * _UNITS[u] for n, u in parts)


def alerting_rules(rule_file: Path) -> list[dict[str, Any]]:
    groups = yaml.safe_load(rule_file.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def _selectors(expr: str) -> set[str]:
    """The metric names that an expression selects with label matchers (`up{...}`)."""
    return set(re.findall(r"([A-Za-z_:][\w:]*)\s*\{", expr))


def _quickest(rules: list[dict[str, Any]], what: str) -> dict[str, Any]:
    if not rules:
        raise AssertionError(f"the rule file has no {what}")
    return min(rules, key=lambda rule: seconds(rule.get("for")))


def triton_down_rule(rule_file: Path) -> dict[str, Any]:
    """The quickest alert on Triton's scrape target alone being down (`up{job="triton"} ... == 0`)."""
    rules = [
        rule
        for rule in alerting_rules(rule_file)
        if _selectors(rule["expr"]) == {"up"} and 'job="triton"' in rule["expr"] and "== 0" in rule["expr"]
    ]
    return _quickest(rules, "alert on Triton's up == 0")


def error_ratio_rule(rule_file: Path) -> dict[str, Any]:
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


def redirect_webhooks(config_file: Path, target: Path, base_url: str) -> dict[str, Any]:
    """A copy of the Alertmanager config whose receivers post to `base_url/<receiver>`; routes,
    inhibitions and timings stay as they are. Returns the copy as data."""
    config = yaml.safe_load(config_file.read_text())
    for receiver in config["receivers"]:
        others = set(receiver) - {"name", "webhook_configs"}
        if others:
            raise AssertionError(f"receiver {receiver['name']} has {sorted(others)}: only webhooks can be redirected")
        for webhook in receiver.get("webhook_configs", []):
            webhook["url"] = f"{base_url}/{receiver['name']}"
    target.write_text(yaml.safe_dump(config, sort_keys=False))
    return config


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
