"""The queue policy of model_repository/text-classifier/config.pbtxt, on the real tritonserver:
Triton reads it as committed, and it rejects what does not fit in the queue instead of queueing
without bound. The overload run uses a copy whose queue holds 2 requests (64 cannot be filled
by the two cores of this machine, whose instance empties the queue as fast as a client fills it);
everything else of the copy is the committed config."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from model_repo_check.tritonserver.server import TritonProcess

pytestmark = pytest.mark.serving_lab

MODELS = Path(__file__).resolve().parents[2] / "model_repository"
MODEL = "text-classifier"
SMALL_QUEUE = 2
REQUESTS = 64


def _repository(tmp_path: Path, max_queue_size: int | None) -> Path:
    repository = tmp_path / "models"
    shutil.copytree(MODELS / MODEL, repository / MODEL)
    if max_queue_size is not None:
        config = repository / MODEL / "config.pbtxt"
        text = config.read_text(encoding="utf-8")
        assert text.count("max_queue_size: 64") == 1
        config.write_text(text.replace("max_queue_size: 64", f"max_queue_size: {max_queue_size}"), encoding="utf-8")
    return repository


def test_triton_reads_the_committed_queue_policy(tmp_path: Path) -> None:
    with (
        TritonProcess(_repository(tmp_path, None), tmp_path / "run") as triton,
        grpcclient.InferenceServerClient(triton.grpc_url) as client,
    ):
        config = client.get_model_config(MODEL, as_json=True)["config"]
    policy = config["dynamic_batching"]["default_queue_policy"]
    # REJECT is TimeoutAction's zero value, which protobuf's JSON leaves out; DELAY would show.
    assert policy.get("timeout_action", "REJECT") == "REJECT"
    assert int(policy["max_queue_size"]) == 64
    assert int(policy["default_timeout_microseconds"]) == 2_000_000
    assert policy["allow_timeout_override"] is True  # the gateway's deadline reaches the queue


def test_an_overloaded_queue_rejects_instead_of_waiting(tmp_path: Path) -> None:
    batch = np.random.default_rng(7).standard_normal((16, 32), dtype=np.float32)
    answered: list[str] = []
    done = threading.Semaphore(0)

    def callback(result: grpcclient.InferResult | None, error: InferenceServerException | None) -> None:
        answered.append("ok" if error is None else str(error))
        done.release()

    with (
        TritonProcess(_repository(tmp_path, SMALL_QUEUE), tmp_path / "run") as triton,
        grpcclient.InferenceServerClient(triton.grpc_url) as client,
    ):
        tensor = grpcclient.InferInput("embedding", list(batch.shape), "FP32")
        tensor.set_data_from_numpy(batch)
        for _ in range(REQUESTS):
            client.async_infer(MODEL, [tensor], callback)
        for _ in range(REQUESTS):
            assert done.acquire(timeout=60), f"only {len(answered)} of {REQUESTS} answered"
    rejected = [error for error in answered if error != "ok"]
    print(
        f"{REQUESTS} requests at once, queue of {SMALL_QUEUE}: {len(answered) - len(rejected)} served, "
        f"{len(rejected)} rejected ({rejected[0] if rejected else '-'})"
    )
    assert rejected and len(rejected) < REQUESTS
    assert all("Exceeds maximum queue size" in error for error in rejected), set(rejected)
