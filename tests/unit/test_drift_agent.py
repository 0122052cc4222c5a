"""The drift agent offline: the live window's bound and checks, Evidently's verdicts on known
distributions, one agent round against a local endpoint that follows the gateway's sample
contract (GET /v1/samples/<model>?limit=N), its HTTP endpoints, and its settings."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from model_repo_check.tritonserver.processes import wait_for
from monitoring import rules
from serving.drift import settings as drift_settings
from serving.drift.agent import DriftAgent, serve
from serving.drift.evaluation import DriftResult, evaluate
from serving.drift.reference import REFERENCE_FILE, load_references
from serving.drift.settings import Settings, parse
from serving.drift.window import FeatureMismatchError, LiveWindow

NAMES = ("f0", "f1", "f2", "f3")
RNG_SEED = 7


def _normal(rows: int, seed: int, shift: float = 0.0) -> list[list[float]]:
    return (np.random.default_rng(seed).standard_normal((rows, len(NAMES))) + shift).tolist()


REFERENCE = _normal(400, RNG_SEED)


# --- window ---------------------------------------------------------------------------------------


def test_the_window_keeps_the_newest_rows_up_to_its_size() -> None:
    window = LiveWindow("m", ("a", "b"), 3)
    window.extend(["a", "b"], [[1, 1], [2, 2]])
    window.extend(["a", "b"], [[3, 3], [4, 4]])
    assert list(window.rows) == [(2.0, 2.0), (3.0, 3.0), (4.0, 4.0)]
    assert (len(window), window.added) == (3, 4)


@pytest.mark.parametrize(
    ("names", "rows", "message"),
    [
        (
            ["a", "c"],
            [],
            r"m: the gateway's drift features differ from the reference's \(missing \['b'\], unknown \['c'\]\)",
        ),
        (["b", "a"], [], r"\(same names, another order\)"),
        (["a", "b"], [[1, 2], [3]], "m: sample row 1 has 1 values, the features are 2"),
        (["a", "b"], [[1, float("nan")]], "m: sample row 0 has a value that is not finite"),
    ],
)
def test_the_window_refuses_rows_unlike_the_reference(names: list[str], rows: list[list[float]], message: str) -> None:
    window = LiveWindow("m", ("a", "b"), 10)
    window.extend(["a", "b"], [[0, 0]])
    with pytest.raises(FeatureMismatchError, match=message):
        window.extend(names, rows)
    assert list(window.rows) == [(0.0, 0.0)]  # all or nothing


# --- evaluation (Evidently) -----------------------------------------------------------------------


def _evaluate(current: list[list[float]]) -> DriftResult:
    return evaluate(NAMES, REFERENCE, current, method="ks", threshold=0.05, drift_share=0.5)


def test_the_reference_replayed_does_not_drift() -> None:
    result = _evaluate(REFERENCE)
    assert (result.drifted_count, result.drifted_share, result.dataset_drift) == (0, 0.0, False)
    assert all(feature.score == pytest.approx(1.0) for feature in result.features.values())
    assert (result.current_rows, result.reference_rows) == (400, 400)


def test_a_fresh_draw_of_the_same_distribution_does_not_drift() -> None:
    result = _evaluate(_normal(200, 8))
    assert result.dataset_drift is False
    assert result.drifted_share < 0.5


def test_a_shifted_distribution_drifts_in_every_feature() -> None:
    result = _evaluate(_normal(200, 9, shift=0.5))
    assert (result.drifted_count, result.drifted_share, result.dataset_drift) == (4, 1.0, True)
    assert all(feature.drifted and feature.score < 0.05 for feature in result.features.values())


def test_one_shifted_feature_of_four_is_not_a_dataset_drift_two_are() -> None:
    replay = np.array(REFERENCE)  # the other features replay the reference: they cannot drift
    replay[:, 2] += 1.0
    result = _evaluate(replay.tolist())
    assert [name for name, feature in result.features.items() if feature.drifted] == ["f2"]
    assert (result.drifted_share, result.dataset_drift) == (0.25, False)
    replay[:, 0] += 1.0
    result = _evaluate(replay.tolist())
    assert (result.drifted_share, result.dataset_drift) == (0.5, True)  # at the share: drift


# --- the agent against a local sample endpoint ----------------------------------------------------


class FakeGateway:
    """GET /v1/samples/<model>?limit=N as serving.gateway answers it, from queued rows."""

    def __init__(self, names: dict[str, list[str]]) -> None:
        self.names = names
        self.queued: dict[str, deque[list[float]]] = {model: deque() for model in names}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                model = url.path.removeprefix("/v1/samples/")
                if model not in fake.names:
                    body, status = {"error": f"no mapping for model {model!r}"}, 404
                else:
                    limit = int(urllib.parse.parse_qs(url.query)["limit"][0])
                    queue = fake.queued[model]
                    rows = [queue.popleft() for _ in range(min(limit, len(queue)))]
                    body, status = {"model": model, "features": fake.names[model], "rows": rows}, 200
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@pytest.fixture
def gateway() -> Iterator[FakeGateway]:
    fake = FakeGateway({"m": list(NAMES)})
    fake.thread.start()
    try:
        yield fake
    finally:
        fake.server.shutdown()
        fake.server.server_close()


def _agent(tmp_path: Path, gateway_url: str) -> DriftAgent:
    (tmp_path / "m").mkdir()
    lines = [",".join(NAMES)] + [",".join(repr(value) for value in row) for row in REFERENCE]
    (tmp_path / "m" / REFERENCE_FILE).write_text("\n".join(lines) + "\n")
    settings = Settings(gateway=gateway_url, reference_dir=tmp_path, window=200, min_rows=100, timeout=5)
    return DriftAgent(settings, load_references(tmp_path))


def _samples(agent: DriftAgent) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(agent.metrics.registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(agent: DriftAgent, name: str, **labels: str) -> float:
    return _samples(agent)[(name, tuple(sorted({"model": "m", **labels}.items())))]


def test_a_round_drains_the_gateway_and_evaluates_only_a_window_with_enough_new_rows(
    tmp_path: Path, gateway: FakeGateway
) -> None:
    agent = _agent(tmp_path, gateway.url)
    assert not agent.ready and agent.problems == {"m": "not pulled yet"}
    gateway.queued["m"].extend(REFERENCE[:50])
    agent.step()
    assert agent.ready
    assert _value(agent, "model_drift_window_rows") == 50
    assert _value(agent, "model_drift_evaluations_total") == 0  # below min_rows
    gateway.queued["m"].extend(REFERENCE[50:200])
    agent.step()
    assert _value(agent, "model_drift_evaluations_total") == 1
    assert _value(agent, "model_drift_drifted_features_share") == 0
    assert _value(agent, "model_drift_dataset_drift") == 0
    assert _value(agent, "model_drift_last_evaluation_samples") == _value(agent, "model_drift_samples_total") == 200
    assert _value(agent, "model_drift_feature_score", feature="f0", method="ks") > 0.5
    agent.step()  # nothing new: no second evaluation of the same window
    assert _value(agent, "model_drift_evaluations_total") == 1
    gateway.queued["m"].extend(_normal(200, 11, shift=0.5))  # the window turns over
    agent.step()
    assert _value(agent, "model_drift_evaluations_total") == 2
    assert _value(agent, "model_drift_drifted_features_share") == 1
    assert _value(agent, "model_drift_dataset_drift") == 1
    assert _value(agent, "model_drift_feature_drifted", feature="f3") == 1
    assert _value(agent, "model_drift_evaluated_rows") == 200
    assert _value(agent, "model_drift_reference_rows") == 400


def test_an_unreachable_gateway_counts_pull_errors_and_is_not_ready(tmp_path: Path, gateway: FakeGateway) -> None:
    agent = _agent(tmp_path, gateway.url)
    gateway.server.shutdown()
    gateway.server.server_close()
    agent.step()
    assert _value(agent, "model_drift_errors_total", stage="pull") == 1
    assert not agent.ready
    assert agent.problems["m"].startswith(f"GET {gateway.url}/v1/samples/m?limit=200 failed")


def test_features_unlike_the_reference_name_the_reference_file(tmp_path: Path, gateway: FakeGateway) -> None:
    agent = _agent(tmp_path, gateway.url)
    gateway.names["m"] = ["f0", "f1", "f2", "brightness"]
    gateway.queued["m"].append([0.0] * 4)
    agent.step()
    assert _value(agent, "model_drift_errors_total", stage="features") == 1
    assert agent.problems["m"] == (
        "m: the gateway's drift features differ from the reference's (missing ['f3'], unknown ['brightness'])"
        f" ({tmp_path / 'm' / REFERENCE_FILE})"
    )


def test_a_model_the_gateway_does_not_map_is_a_pull_error(tmp_path: Path, gateway: FakeGateway) -> None:
    agent = _agent(tmp_path, gateway.url)
    del gateway.names["m"]
    agent.step()
    assert "answered 404" in agent.problems["m"]


def _http(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_the_http_endpoints(tmp_path: Path, gateway: FakeGateway) -> None:
    agent = _agent(tmp_path, gateway.url)
    server = serve(agent, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert _http(f"{base}/livez")[0] == 503  # the loop has not started
        status, body = _http(f"{base}/readyz")
        assert (status, json.loads(body)) == (503, {"ready": False, "problems": {"m": "not pulled yet"}})
        agent.start()
        try:
            assert _http(f"{base}/livez") == (200, '{"alive": true}')
            wait_for(lambda: agent.ready, 10, "the first round (at start) to reach the gateway", 0.1)
            assert _http(f"{base}/readyz")[0] == 200
            status, text = _http(f"{base}/metrics")
            assert status == 200 and 'model_drift_reference_rows{model="m"} 400.0' in text
            assert _http(f"{base}/other")[0] == 404
        finally:
            agent.stop()
        assert _http(f"{base}/livez")[0] == 503
    finally:
        server.shutdown()
        server.server_close()


# --- settings --------------------------------------------------------------------------------------


def test_settings_come_from_options_or_environment_variables() -> None:
    settings = parse(
        ["--window", "300", "--reference-dir", "/models"],
        {"DRIFT_GATEWAY": "http://gw:8000/", "DRIFT_PORT": "9100", "DRIFT_INTERVAL": "5"},
    )
    assert (settings.gateway, settings.port, settings.interval, settings.window) == ("http://gw:8000", 9100, 5.0, 300)
    assert settings.reference_dir == Path("/models")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "--gateway (or DRIFT_GATEWAY) is required"),
        (["--gateway", "http://g", "--drift-share", "0"], "--drift-share must be in (0, 1], got 0.0"),
        (["--gateway", "http://g", "--min-rows", "600"], "--min-rows must be between 1 and --window (500), got 600"),
        (["--gateway", "http://g", "--interval", "0"], "--interval must be positive, got 0.0"),
    ],
)
def test_bad_settings_are_refused_naming_the_option(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse(argv, {})
    assert message in capsys.readouterr().err


def test_the_alert_and_the_agent_use_the_same_share() -> None:
    assert rules.DRIFT_SHARE == drift_settings.DRIFT_SHARE
