"""serving.gateway in front of the real tritonserver: the same answers as Triton direct, 422
naming the bad field, the request ID through Triton and back, metrics and drift samples, 429
past its own bound, 504 past the deadline, and readiness that follows Triton's (503 once it is
gone, within one probe period)."""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from lab_fleet.gateway import GatewayProcess
from lab_fleet.serving import ServingLab
from model_repo_check.tritonserver.server import REPO, TritonProcess
from tests.serving_lab.clients import infer, metric_sum

pytestmark = pytest.mark.serving_lab

RNG = np.random.default_rng(16)
LABELS = (REPO / "model_repository/text-classifier/labels.txt").read_text().split()


@pytest.fixture(scope="module")
def gateway(serving_lab: ServingLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(serving_lab.triton.grpc_url, tmp_path_factory.mktemp("gateway")) as process:
        yield process


@pytest.fixture
def client(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=10) as http:
        yield http


def _image() -> np.ndarray:
    return RNG.integers(0, 256, (224, 224, 3), dtype=np.uint8)


def _image_body(image: np.ndarray) -> dict[str, str]:
    return {"image": base64.b64encode(image.tobytes()).decode()}


def test_text_classifier_answers_like_triton_direct(serving_lab: ServingLab, client: httpx.Client) -> None:
    for embedding in RNG.standard_normal((5, 32)).astype(np.float32):
        response = client.post("/v1/text-classifier", json={"embedding": embedding.tolist()})
        assert response.status_code == 200, response.text
        direct = infer(serving_lab.triton, "text-classifier", {"embedding": embedding[np.newaxis]})
        logits, probabilities = direct.as_numpy("logits")[0], direct.as_numpy("probabilities")[0]
        answer = response.json()
        assert np.array_equal(np.asarray(answer["logits"], np.float32), logits)
        assert list(answer["probabilities"]) == LABELS
        assert np.array_equal(np.asarray(list(answer["probabilities"].values()), np.float32), probabilities)
        assert answer["label"] == LABELS[int(np.argmax(probabilities))]


def test_image_preprocess_answers_like_triton_direct(serving_lab: ServingLab, client: httpx.Client) -> None:
    image = _image()
    response = client.post("/v1/image-preprocess", json=_image_body(image))
    assert response.status_code == 200, response.text[:500]
    pixels = np.frombuffer(base64.b64decode(response.json()["pixels"]), "<f4").reshape(3, 224, 224)
    direct = infer(serving_lab.triton, "image-preprocess", {"image": image}).as_numpy("pixels")
    assert direct.shape == (3, 224, 224)
    assert np.array_equal(pixels, direct)


@pytest.mark.parametrize(
    ("path", "body", "field", "message"),
    [
        ("/v1/text-classifier", '{"embedding": [0.5, 0.5]}', "embedding", "at least 32 items"),
        ("/v1/text-classifier", '{"embedding": [' + "0.5, " * 31 + '"high"]}', "embedding.31", "valid number"),
        ("/v1/text-classifier", '{"embeding": []}', "embedding", "Field required"),
        ("/v1/text-classifier", '{"embedding": [0.5,', "body", "Invalid JSON"),
        ("/v1/image-preprocess", '{"image": "AAAA"}', "image", "decodes to 3 bytes"),
    ],
)
def test_bad_json_is_422_naming_the_field(client: httpx.Client, path: str, body: str, field: str, message: str) -> None:
    response = client.post(path, content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert any(item["field"] == field and message in item["msg"] for item in detail), detail


def test_an_unmapped_model_is_404(client: httpx.Client) -> None:
    assert client.post("/v1/no-such-model", json={}).status_code == 404
    response = client.get("/v1/samples/no-such-model")
    assert response.status_code == 404
    assert response.json()["models"] == ["image-preprocess", "text-classifier"]


def test_the_request_id_goes_through_triton_and_back(client: httpx.Client) -> None:
    body = {"embedding": [0.25] * 32}
    response = client.post("/v1/text-classifier", json=body, headers={"X-Request-ID": "order-16.a:1"})
    assert response.status_code == 200
    # The header is Triton's own echo (ModelInferResponse.id), so it proves Triton had it.
    assert response.headers["X-Request-ID"] == "order-16.a:1"
    generated = client.post("/v1/text-classifier", json=body).headers["X-Request-ID"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)
    bad = client.post("/v1/text-classifier", json=body, headers={"X-Request-ID": "x" * 200})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["field"] == "header X-Request-ID"


def test_metrics_count_requests_by_model_and_code(client: httpx.Client) -> None:
    before = client.get("/metrics").text
    for _ in range(3):
        assert client.post("/v1/text-classifier", json={"embedding": [0.0] * 32}).status_code == 200
    assert client.post("/v1/text-classifier", json={"embedding": []}).status_code == 422
    after = client.get("/metrics").text
    ok = {"model": "text-classifier", "code": "200"}

    def delta(name: str, **labels: str) -> float:
        return metric_sum(after, name, **labels) - metric_sum(before, name, **labels)

    assert delta("gateway_requests_total", **ok) == 3
    assert delta("gateway_requests_total", model="text-classifier", code="422") == 1
    assert delta("gateway_request_duration_seconds_count", model="text-classifier") == 4
    assert delta("gateway_triton_request_duration_seconds_count", model="text-classifier") == 3
    assert metric_sum(after, "gateway_triton_ready") == 1
    assert metric_sum(after, "gateway_requests_in_flight", model="text-classifier") == 0
    assert "gateway_rejections_total" in after


def test_drift_samples_are_the_requests_features(client: httpx.Client) -> None:
    client.get("/v1/samples/text-classifier", params={"limit": 100_000})  # what earlier tests left
    embeddings = RNG.standard_normal((3, 32)).astype(np.float32)
    for embedding in embeddings:
        assert client.post("/v1/text-classifier", json={"embedding": embedding.tolist()}).status_code == 200
    first = client.get("/v1/samples/text-classifier", params={"limit": 2}).json()
    assert first["model"] == "text-classifier"
    assert first["features"] == [f"embedding_{i}" for i in range(32)]
    rest = client.get("/v1/samples/text-classifier", params={"limit": 10}).json()["rows"]
    assert np.array_equal(np.asarray(first["rows"] + rest, np.float32), embeddings)
    assert client.get("/v1/samples/text-classifier").json()["rows"] == []


def test_past_its_own_bound_the_gateway_answers_429(
    serving_lab: ServingLab, start_gateway: Callable[..., GatewayProcess]
) -> None:
    gateway = start_gateway(serving_lab.triton.grpc_url, "--max-concurrency", "1", "--max-queue", "0")
    body = _image_body(_image())
    with httpx.Client(base_url=gateway.url, timeout=10) as http, ThreadPoolExecutor(16) as pool:
        responses = list(pool.map(lambda _: http.post("/v1/image-preprocess", json=body), range(48)))
        metrics = http.get("/metrics").text
    codes = [response.status_code for response in responses]
    assert set(codes) == {200, 429}, codes
    refused = [response for response in responses if response.status_code == 429]
    assert all(response.headers["Retry-After"] == "1" for response in refused)
    assert "gateway overloaded" in refused[0].json()["error"]
    rejected = metric_sum(metrics, "gateway_rejections_total", model="image-preprocess", reason="overloaded")
    assert rejected == len(refused)


def test_past_the_deadline_the_gateway_answers_504(
    serving_lab: ServingLab, start_gateway: Callable[..., GatewayProcess]
) -> None:
    # 0.2 ms: less than any inference of a 224x224 image takes on this machine.
    gateway = start_gateway(serving_lab.triton.grpc_url, "--deadline-ms", "0.2")
    response = httpx.post(f"{gateway.url}/v1/image-preprocess", json=_image_body(_image()), timeout=10)
    assert response.status_code == 504, response.text
    assert "no answer within 0.2 ms" in response.json()["error"]


def test_stopping_triton_turns_readiness_false_within_one_probe_period(
    tmp_path: Path, start_gateway: Callable[..., GatewayProcess]
) -> None:
    period = 1.0
    body = {"embedding": [0.5] * 32}
    with TritonProcess(REPO / "model_repository", tmp_path / "triton") as triton:
        gateway = start_gateway(triton.grpc_url, "--probe-period-s", str(period))
        assert httpx.get(f"{gateway.url}/readyz").json()["ready"] is True
        assert httpx.post(f"{gateway.url}/v1/text-classifier", json=body).status_code == 200
        triton.stop()
        stopped = time.monotonic()
        # The probe alone (no request in between) notices within one period.
        while (readyz := httpx.get(f"{gateway.url}/readyz")).status_code == 200:
            assert time.monotonic() - stopped <= period, "readiness still true one probe period after Triton stopped"
            time.sleep(0.05)
        noticed = time.monotonic() - stopped
        assert readyz.status_code == 503 and readyz.json()["ready"] is False
        response = httpx.post(f"{gateway.url}/v1/text-classifier", json=body)
        assert response.status_code == 503, response.text
        assert response.json()["error"].startswith("Triton is not ready")
        metrics = httpx.get(f"{gateway.url}/metrics").text
        assert metric_sum(metrics, "gateway_triton_ready") == 0
        assert metric_sum(metrics, "gateway_rejections_total", model="text-classifier", reason="triton_not_ready") == 1
        assert noticed <= period
