"""serving/gateway request models, drift features, sample buffers and the admission bound,
offline (the serving lab tests the gateway against the real Triton)."""

from __future__ import annotations

import asyncio
import base64
import random
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from serving.gateway import schema
from serving.gateway.admission import Admission, OverloadedError
from serving.gateway.features import SampleBuffer, features
from serving.gateway.mapping import load_mappings
from serving.gateway.settings import MAPPINGS

MAPPINGS_BY_MODEL = load_mappings(MAPPINGS, Path(__file__).resolve().parents[2] / "model_repository")
TEXT = MAPPINGS_BY_MODEL["text-classifier"]
IMAGE = MAPPINGS_BY_MODEL["image-preprocess"]


def _errors(mapping, body: str) -> list[dict[str, str]]:
    with pytest.raises(ValidationError) as raised:
        schema.request_model(mapping).model_validate_json(body)
    return schema.field_errors(raised.value)


def test_a_valid_embedding_becomes_the_tensor() -> None:
    values = [float(i) / 8 for i in range(32)]
    request = schema.request_model(TEXT).model_validate_json(f'{{"embedding": {values}}}')
    arrays = schema.arrays(TEXT, request)
    assert arrays["embedding"].dtype == np.float32
    assert arrays["embedding"].tolist() == values
    (tensor,) = schema.infer_inputs(TEXT, arrays)
    assert (tensor.name(), tensor.shape(), tensor.datatype()) == ("embedding", [1, 32], "FP32")


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ('{"embedding": [1.0]}', "embedding", "at least 32 items"),
        ('{"embedding": [' + ", ".join(["1"] * 31) + ', "x"]}', "embedding.31", "valid number"),
        ("{}", "embedding", "Field required"),
        ('{"embedding": [' + ", ".join(["1"] * 32) + '], "text": "hi"}', "text", "Extra inputs"),
        ('{"embedding": ', "body", "Invalid JSON"),
        ("[]", "body", "should be an object"),
    ],
)
def test_bad_json_names_the_field(body: str, field: str, message: str) -> None:
    errors = _errors(TEXT, body)
    assert any(error["field"] == field and message in error["msg"] for error in errors), errors


def test_an_image_is_exactly_its_tensor_bytes() -> None:
    image = np.arange(224 * 224 * 3, dtype=np.uint64).astype(np.uint8).reshape(224, 224, 3)
    request = schema.request_model(IMAGE).model_validate_json(
        f'{{"image": "{base64.b64encode(image.tobytes()).decode()}"}}'
    )
    assert np.array_equal(schema.arrays(IMAGE, request)["image"], image)
    (short,) = _errors(IMAGE, f'{{"image": "{base64.b64encode(b"abc").decode()}"}}')
    assert short["field"] == "image"
    assert "decodes to 3 bytes; UINT8 224x224x3 is 150528 bytes" in short["msg"]
    (garbage,) = _errors(IMAGE, '{"image": "not base64!"}')
    assert garbage["field"] == "image" and "not base64" in garbage["msg"]


def test_drift_features_of_each_model() -> None:
    embedding = np.linspace(-1, 1, 32, dtype=np.float32)
    assert features(TEXT, {"embedding": embedding}) == embedding.astype(np.float64).tolist()
    image = np.zeros((224, 224, 3), dtype=np.uint8)
    image[..., 0] = 200
    image[:112, :, 2] = 100  # blue: half 100, half 0 -> mean 50, std 50
    assert features(IMAGE, {"image": image}) == [200.0, 0.0, 50.0, 0.0, 0.0, 50.0]


def test_the_sample_buffer_keeps_the_newest_rows_and_drains_oldest_first() -> None:
    buffer = SampleBuffer(["a"], size=3, rate=1.0)
    dropped = [buffer.add([float(i)]) for i in range(5)]
    assert dropped == [False, False, False, True, True]
    assert buffer.drain(2) == [[2.0], [3.0]]
    assert buffer.drain(10) == [[4.0]]
    assert buffer.drain(10) == []


def test_sampling_keeps_about_its_rate() -> None:
    buffer = SampleBuffer(["a"], size=10_000, rate=0.25, rng=random.Random(7))
    kept = sum(buffer.sampled() for _ in range(4000))
    assert 900 < kept < 1100


def test_admission_refuses_beyond_concurrency_plus_queue() -> None:
    async def scenario() -> list[str]:
        admission = Admission(concurrency=1, queue=1)
        release = asyncio.Event()
        outcomes: list[str] = []

        async def call(name: str) -> None:
            try:
                async with admission.admitted(), admission.turn():
                    outcomes.append(f"{name} in")
                    await release.wait()
            except OverloadedError:
                outcomes.append(f"{name} refused")

        first, second = asyncio.create_task(call("a")), asyncio.create_task(call("b"))
        await asyncio.sleep(0)
        await call("c")  # one at the slot, one queued: full
        release.set()
        await asyncio.gather(first, second)
        return outcomes

    assert asyncio.run(scenario()) == ["a in", "c refused", "b in"]
