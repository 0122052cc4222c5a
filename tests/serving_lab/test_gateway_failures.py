"""The gateway's failure semantics against the real tritonserver: Triton's full queue is 429 for
that model and never 503, with /readyz steady throughout; a model unloaded fails alone (503 for
it, 200 for the other, /readyz 200) and comes back by itself; the deadline reaches Triton's queue
policy; bad input (an oversized body, malformed JSON, an unknown model) is answered without
disturbing the requests running beside it.

Triton here is a copy of model_repository/ whose text-classifier queue holds 2 requests (64
cannot be filled from this machine's two cores, see test_queue_policy.py), run with explicit
model control so that a test can unload a model."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import tritonclient.grpc as grpcclient

from lab_fleet.gateway import GatewayProcess
from model_repo_check.tritonserver.server import REPO, TritonProcess
from tests.serving_lab.clients import metric_sum

pytestmark = pytest.mark.serving_lab

SMALL_QUEUE = 2
TEXT = {"embedding": [0.5] * 32}
PERIOD_S = 0.5


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonProcess]:
    folder = tmp_path_factory.mktemp("triton-small-queue")
    repository = folder / "models"
    shutil.copytree(REPO / "model_repository", repository, ignore=shutil.ignore_patterns("README.md"))
    config = repository / "text-classifier/config.pbtxt"
    text = config.read_text()
    assert text.count("max_queue_size: 64") == 1
    config.write_text(text.replace("max_queue_size: 64", f"max_queue_size: {SMALL_QUEUE}"))
    args = ["--model-control-mode=explicit", "--load-model=*"]
    with TritonProcess(repository, folder / "run", args) as process:
        yield process


@pytest.fixture
def start_gateway(start_gateway: Callable[..., GatewayProcess]) -> Callable[..., GatewayProcess]:
    """conftest's start_gateway, probing Triton every PERIOD_S."""
    return lambda triton_grpc, *args: start_gateway(triton_grpc, "--probe-period-s", str(PERIOD_S), *args)


class ReadyzWatch:
    """Polls /readyz every 100 ms in a thread and keeps every status code it got."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.codes: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        with httpx.Client(timeout=5) as http:
            while not self._stop.wait(0.1):
                self.codes.append(http.get(f"{self.url}/readyz").status_code)

    def __enter__(self) -> ReadyzWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def _flood(url: str, path: str, body: dict[str, object], requests: int, concurrency: int) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        gate = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as http:

            async def one() -> httpx.Response:
                async with gate:
                    return await http.post(path, json=body)

            return await asyncio.gather(*(one() for _ in range(requests)))

    return asyncio.run(run())


def _metric(url: str, name: str, **labels: str) -> float:
    return metric_sum(httpx.get(f"{url}/metrics").text, name, required=True, **labels)


def test_a_full_queue_at_triton_is_429_for_that_model_and_readiness_never_flaps(
    triton: TritonProcess, start_gateway: Callable[..., GatewayProcess]
) -> None:
    # The gateway's own bound far above Triton's queue, as when several gateway replicas share one Triton.
    gateway = start_gateway(triton.grpc_url, "--max-concurrency", "512", "--max-queue", "2048")
    with ReadyzWatch(gateway.url) as watch:
        responses = _flood(gateway.url, "/v1/text-classifier", TEXT, requests=1500, concurrency=200)
    codes = Counter(response.status_code for response in responses)
    print(
        f"1500 requests at concurrency 200, Triton's queue of {SMALL_QUEUE}: {dict(codes)};"
        f" /readyz {Counter(watch.codes)}"
    )
    # 504: a request that waited past the deadline for the gateway's own turn on a starved machine.
    assert 503 not in codes and codes[429] > 0 and codes[200] > 0 and set(codes) <= {200, 429, 504}, codes
    refused = [response for response in responses if response.status_code == 429]
    assert all(response.headers["Retry-After"] == "1" for response in refused)
    assert "Exceeds maximum queue size" in refused[0].json()["error"]
    assert len(watch.codes) >= 5 and set(watch.codes) == {200}, f"/readyz flapped: {Counter(watch.codes)}"
    assert _metric(gateway.url, "gateway_rejections_total", model="text-classifier", reason="triton_overloaded") == len(
        refused
    )
    assert _metric(gateway.url, "gateway_triton_ready") == 1


def test_an_unloaded_model_fails_alone_and_comes_back(
    triton: TritonProcess, start_gateway: Callable[..., GatewayProcess]
) -> None:
    gateway = start_gateway(triton.grpc_url)
    image = {"image": "A" * (224 * 224 * 3 * 4 // 3)}
    with (
        httpx.Client(base_url=gateway.url, timeout=10) as http,
        grpcclient.InferenceServerClient(triton.grpc_url) as admin,
    ):
        assert http.post("/v1/image-preprocess", json=image).status_code == 200
        admin.unload_model("image-preprocess")
        try:
            # The first request after the unload learns it from Triton's answer; the probe from then on.
            refused = http.post("/v1/image-preprocess", json=image)
            assert refused.status_code == 503, refused.text
            assert refused.headers["Retry-After"] == "1"
            assert http.post("/v1/text-classifier", json=TEXT).status_code == 200
            assert http.get("/readyz").status_code == 200
            assert http.get("/v1/image-preprocess/ready").status_code == 503
            assert http.get("/v1/text-classifier/ready").status_code == 200
            again = http.post("/v1/image-preprocess", json=image)
            assert again.status_code == 503 and "is not ready" in again.json()["error"]
            assert _metric(gateway.url, "gateway_model_ready", model="image-preprocess") == 0
            assert _metric(gateway.url, "gateway_model_ready", model="text-classifier") == 1
        finally:
            admin.load_model("image-preprocess")
        deadline = time.monotonic() + 4 * PERIOD_S + 5
        while http.get("/v1/image-preprocess/ready").status_code != 200:
            assert time.monotonic() < deadline, "image-preprocess not ready again after its load"
            time.sleep(0.05)
        assert http.post("/v1/image-preprocess", json=image).status_code == 200
    rejected = _metric(gateway.url, "gateway_rejections_total", model="image-preprocess", reason="model_not_ready")
    assert rejected == 2


def test_the_deadline_reaches_tritons_queue(tmp_path: Path, start_gateway: Callable[..., GatewayProcess]) -> None:
    """A request still queued at Triton when the gateway's deadline runs out is dropped by the queue
    policy (allow_timeout_override, the committed config's queue of 64), whose own answer says so,
    instead of running late."""
    with TritonProcess(REPO / "model_repository", tmp_path / "triton") as committed:
        gateway = start_gateway(
            committed.grpc_url, "--deadline-ms", "40", "--max-concurrency", "512", "--max-queue", "2048"
        )
        responses = _flood(gateway.url, "/v1/text-classifier", TEXT, requests=800, concurrency=200)
    late = [response.json()["error"] for response in responses if response.status_code == 504]
    print(f"800 requests, deadline 40 ms: {dict(Counter(r.status_code for r in responses))}")
    assert any("Request timeout expired" in error for error in late), late[:3]


def test_bad_input_is_answered_without_disturbing_requests_beside_it(
    triton: TritonProcess, start_gateway: Callable[..., GatewayProcess]
) -> None:
    gateway = start_gateway(triton.grpc_url)
    beside: list[int] = []
    stop = threading.Event()

    def steady() -> None:
        with httpx.Client(base_url=gateway.url, timeout=10) as http:
            while not stop.is_set():
                beside.append(http.post("/v1/text-classifier", json=TEXT).status_code)

    thread = threading.Thread(target=steady)
    thread.start()
    try:
        with httpx.Client(base_url=gateway.url, timeout=30) as http:
            huge = http.post("/v1/text-classifier", content=b"[" + b"0.5," * (1 << 20) + b"0.5]")
            streamed = http.post("/v1/text-classifier", content=iter([b"{" + b" " * 65536] * 32))
            broken = http.post(
                "/v1/text-classifier", content=b'{"embedding": [0.5,', headers={"Content-Type": "application/json"}
            )
            unknown = http.post("/v1/no-such-model", json=TEXT)
    finally:
        stop.set()
        thread.join()
    assert huge.status_code == 413 and "larger than the limit" in huge.json()["error"], huge.text
    assert streamed.status_code == 413, streamed.text  # chunked, no Content-Length: counted as it arrives
    assert broken.status_code == 422 and broken.json()["detail"][0]["field"] == "body", broken.text
    assert unknown.status_code == 404 and "no-such-model" in unknown.json()["error"], unknown.text
    assert beside and set(beside) == {200}, Counter(beside)
