"""The lab's Triton serves model_repository/ as committed: real inference and its metrics."""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from lab_fleet.serving import SCRAPE_INTERVAL_S, ServingLab
from model_repo_check.tritonserver.processes import wait_for
from tests.serving_lab.clients import infer

pytestmark = pytest.mark.serving_lab

MODELS = Path(__file__).resolve().parents[2] / "model_repository"


def reference(model: str, version: str, inputs: dict[str, np.ndarray], outputs: list[str]) -> list[np.ndarray]:
    """The same ONNX file run directly with onnxruntime."""
    session = onnxruntime.InferenceSession(
        str(MODELS / model / version / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    return session.run(outputs, inputs)


@pytest.mark.parametrize("version", ["1", "2"])
def test_text_classifier_answers_a_batch_like_onnxruntime(serving_lab: ServingLab, version: str) -> None:
    embedding = np.random.default_rng(int(version)).standard_normal((3, 32)).astype(np.float32)
    result = infer(serving_lab.triton, "text-classifier", {"embedding": embedding}, version=version)
    logits, probabilities = result.as_numpy("logits"), result.as_numpy("probabilities")
    assert logits.shape == probabilities.shape == (3, 4)
    assert probabilities.dtype == np.float32
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    expected = reference("text-classifier", version, {"embedding": embedding}, ["logits", "probabilities"])
    np.testing.assert_allclose(logits, expected[0], rtol=1e-5)
    np.testing.assert_allclose(probabilities, expected[1], rtol=1e-5)


def test_image_preprocess_answers_one_image_like_onnxruntime(serving_lab: ServingLab) -> None:
    image = np.random.default_rng(7).integers(0, 256, (224, 224, 3), dtype=np.uint8)
    pixels = infer(serving_lab.triton, "image-preprocess", {"image": image}).as_numpy("pixels")
    assert pixels.shape == (3, 224, 224)
    assert pixels.dtype == np.float32
    np.testing.assert_allclose(pixels, reference("image-preprocess", "1", {"image": image}, ["pixels"])[0], rtol=1e-6)


def test_load_shows_in_tritons_metrics_and_in_prometheus(serving_lab: ServingLab, load) -> None:
    output = load(serving_lab.triton, "text-classifier", 3, "--concurrency-range", "2").stdout
    assert re.search(r"Throughput: [\d.]+ infer/sec", output), output
    with urllib.request.urlopen(serving_lab.triton.metrics_url, timeout=10) as response:
        metrics = response.read().decode()
    success = re.findall(
        r'^nv_inference_request_success\{model="text-classifier",version="(\d)"\} (\d+)', metrics, re.M
    )
    assert sum(int(count) for _, count in success) > 0, metrics
    for name in ("nv_inference_count", "nv_inference_exec_count", "nv_inference_queue_duration_us"):
        assert re.search(rf'^{name}\{{model="text-classifier"', metrics, re.M), f"{name} missing"
    assert re.search(r'^nv_inference_request_summary_us\{.*quantile="0.5"', metrics, re.M), "no summary latencies"

    def recorded() -> bool:  # the project's recording rules, evaluated on the lab's scrapes
        query = urllib.parse.urlencode(
            {"query": 'model_version:nv_inference_request_success:rate1m{model="text-classifier"}'}
        )
        with urllib.request.urlopen(f"{serving_lab.prometheus_url}/api/v1/query?{query}", timeout=5) as response:
            return any(float(r["value"][1]) > 0 for r in json.load(response)["data"]["result"])

    wait_for(recorded, 5 * SCRAPE_INTERVAL_S, "a positive text-classifier request rate recorded in Prometheus")
