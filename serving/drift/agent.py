"""The drift agent: every `interval` seconds, for each model with a reference window, drain the
gateway's sampled rows into the model's live window and, when rows came in and the window holds
at least `min_rows`, compare it with the reference; serve the result on /metrics, with /livez
(the loop runs) and /readyz (the last pull of every model reached the gateway and matched the
reference's features)."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from serving.drift import settings as settings_module
from serving.drift.evaluation import evaluate
from serving.drift.metrics import DriftMetrics
from serving.drift.reference import Reference, load_references
from serving.drift.settings import Settings
from serving.drift.source import SampleSourceError, pull
from serving.drift.window import FeatureMismatchError, LiveWindow

log = logging.getLogger("serving.drift")


class DriftAgent:
    def __init__(self, settings: Settings, references: dict[str, Reference]) -> None:
        self.settings = settings
        self.references = references
        self.windows = {model: LiveWindow(model, ref.names, settings.window) for model, ref in references.items()}
        self.metrics = DriftMetrics()
        self.problems: dict[str, str] = {model: "not pulled yet" for model in references}
        self._evaluated_at: dict[str, int] = {model: 0 for model in references}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="drift-loop", daemon=True)
        for model, reference in references.items():
            self.metrics.start(model, len(reference.rows))

    # --- one round -----------------------------------------------------------------------------

    def _pull(self, model: str) -> bool:
        """Drain the gateway's buffer into the window; True when the window took rows."""
        window = self.windows[model]
        try:
            samples = pull(self.settings.gateway, model, self.settings.window, self.settings.timeout)
            window.extend(samples.names, samples.rows)
        except SampleSourceError as err:
            return self._failed(model, "pull", str(err))
        except FeatureMismatchError as err:
            return self._failed(model, "features", f"{err} ({self.references[model].path})")
        self.problems.pop(model, None)
        self.metrics.samples.labels(model).inc(len(samples.rows))
        self.metrics.window_rows.labels(model).set(len(window))
        return bool(samples.rows)

    def _failed(self, model: str, stage: str, problem: str) -> bool:
        log.warning("%s", problem)
        self.problems[model] = problem
        self.metrics.errors.labels(model, stage).inc()
        return False

    def _evaluate(self, model: str) -> None:
        window, reference = self.windows[model], self.references[model]
        if len(window) < self.settings.min_rows or window.added == self._evaluated_at[model]:
            return
        began, samples = time.monotonic(), window.added
        try:
            result = evaluate(
                reference.names,
                reference.rows,
                list(window.rows),
                method=self.settings.method,
                threshold=self.settings.threshold,
                drift_share=self.settings.drift_share,
            )
        except Exception as err:  # Evidently's failures have no common type; count, log, go on
            log.exception("%s: drift evaluation failed", model)
            self._failed(model, "evaluate", f"{model}: drift evaluation failed: {err}")
            return
        self._evaluated_at[model] = samples
        self.metrics.publish(model, self.settings.method, result, samples, time.time(), time.monotonic() - began)

    def step(self) -> None:
        for model in self.references:
            self._pull(model)
            self._evaluate(model)

    # --- lifecycle -----------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._stop.wait(self.settings.interval)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def ready(self) -> bool:
        return not self.problems


def _handler(agent: DriftAgent) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, body: dict[str, Any]) -> None:
            self._send(status, json.dumps(body).encode(), "application/json")

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(agent.metrics.registry), CONTENT_TYPE_LATEST)
            elif path == "/livez":
                self._json(200 if agent.alive else 503, {"alive": agent.alive})
            elif path == "/readyz":
                self._json(200 if agent.ready else 503, {"ready": agent.ready, "problems": agent.problems})
            else:
                self._json(404, {"error": f"no such path {path}", "paths": ["/metrics", "/livez", "/readyz"]})

        def log_message(self, format: str, *args: Any) -> None:
            log.debug(format, *args)

    return Handler


def serve(agent: DriftAgent, host: str, port: int) -> ThreadingHTTPServer:
    return ThreadingHTTPServer((host, port), _handler(agent))


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM (Kubernetes, stop_group) stops like Ctrl-C


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = settings_module.parse(argv)
    agent = DriftAgent(settings, load_references(settings.reference_dir))
    server = serve(agent, settings.host, settings.port)
    log.info(
        "serving /metrics on %s:%d; models %s from %s",
        settings.host,
        settings.port,
        ", ".join(agent.references),
        settings.gateway,
    )
    signal.signal(signal.SIGTERM, _interrupt)
    agent.start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        agent.stop()
