"""The ONNX graphs of the example models in model_repository/, built with the onnx helper API.

Everything here is deterministic: weights come from numpy's legacy RandomState (whose stream
numpy keeps stable across releases) with a fixed seed per model version, and the graphs carry
no timestamps, so rebuilding gives byte-identical files.

OPSET and IR_VERSION are deliberately old: the onnxruntime inside the oldest Triton release
we serve must load them, and the onnxruntime pinned in requirements.txt (used by the
validator's smoke inference) loads every opset from 7 on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
PRODUCER = "gpu-serving build_example_models"

TEXT_FEATURES = 32
TEXT_HIDDEN = 16
TEXT_LABELS = ("negative", "neutral", "positive", "spam")
IMAGE_SIDE = 224
# ImageNet channel statistics, the usual preprocessing of torchvision models (RGB order).
IMAGE_MEAN = (0.485, 0.456, 0.406)
IMAGE_STD = (0.229, 0.224, 0.225)


def finish_model(graph: onnx.GraphProto, doc: str) -> onnx.ModelProto:
    """The graph as a checked model of the fixed opset and IR version, no timestamps."""
    model = helper.make_model(
        graph,
        producer_name=PRODUCER,
        doc_string=doc,
        opset_imports=[helper.make_opsetid("", OPSET)],
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def _initializer(name: str, values: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(values.astype(np.float32), name=name)


def text_classifier(seed: int = 1, input_name: str = "embedding", batch_axis: bool = True) -> onnx.ModelProto:
    """A two-layer MLP over a sentence embedding: embedding[B, 32] -> logits and probabilities [B, 4].

    `input_name` and `batch_axis` exist so tests can build the mistaken variants (an input name
    that differs from the config, a model exported without its batch axis).
    """
    rng = np.random.RandomState(seed)
    lead: list[str | int] = ["batch"] if batch_axis else []
    graph = helper.make_graph(
        nodes=[
            helper.make_node("MatMul", [input_name, "w1"], ["h1"]),
            helper.make_node("Add", ["h1", "b1"], ["h1b"]),
            helper.make_node("Relu", ["h1b"], ["h1r"]),
            helper.make_node("MatMul", ["h1r", "w2"], ["h2"]),
            helper.make_node("Add", ["h2", "b2"], ["logits"]),
            helper.make_node("Softmax", ["logits"], ["probabilities"], axis=-1),
        ],
        name="text_classifier",
        inputs=[helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [*lead, TEXT_FEATURES])],
        outputs=[
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [*lead, len(TEXT_LABELS)]),
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [*lead, len(TEXT_LABELS)]),
        ],
        initializer=[
            _initializer("w1", rng.normal(0.0, 0.2, (TEXT_FEATURES, TEXT_HIDDEN))),
            _initializer("b1", rng.normal(0.0, 0.05, (TEXT_HIDDEN,))),
            _initializer("w2", rng.normal(0.0, 0.2, (TEXT_HIDDEN, len(TEXT_LABELS)))),
            _initializer("b2", rng.normal(0.0, 0.05, (len(TEXT_LABELS),))),
        ],
    )
    return finish_model(graph, f"Sentence-embedding classifier, weights seed {seed}.")


def image_preprocess() -> onnx.ModelProto:
    """One HWC uint8 RGB image -> normalised CHW float32 tensor; fixed shape, no batch axis."""
    side = IMAGE_SIDE
    graph = helper.make_graph(
        nodes=[
            helper.make_node("Cast", ["image"], ["as_float"], to=TensorProto.FLOAT),
            helper.make_node("Div", ["as_float", "scale"], ["unit"]),
            helper.make_node("Sub", ["unit", "mean"], ["centred"]),
            helper.make_node("Div", ["centred", "std"], ["normalised"]),
            helper.make_node("Transpose", ["normalised"], ["pixels"], perm=[2, 0, 1]),
        ],
        name="image_preprocess",
        inputs=[helper.make_tensor_value_info("image", TensorProto.UINT8, [side, side, 3])],
        outputs=[helper.make_tensor_value_info("pixels", TensorProto.FLOAT, [3, side, side])],
        initializer=[
            _initializer("scale", np.array([255.0])),
            _initializer("mean", np.array(IMAGE_MEAN)),
            _initializer("std", np.array(IMAGE_STD)),
        ],
    )
    return finish_model(graph, "HWC uint8 RGB image to normalised CHW float32.")


@dataclass(frozen=True)
class Artifact:
    """One file of the example repository that the builder owns."""

    relpath: str
    build: Callable[[], bytes]


def _serialized(build: Callable[[], onnx.ModelProto]) -> Callable[[], bytes]:
    return lambda: build().SerializeToString(deterministic=True)


ARTIFACTS = (
    Artifact("text-classifier/1/model.onnx", _serialized(lambda: text_classifier(seed=1))),
    Artifact("text-classifier/2/model.onnx", _serialized(lambda: text_classifier(seed=2))),
    Artifact("text-classifier/labels.txt", lambda: "".join(f"{label}\n" for label in TEXT_LABELS).encode()),
    Artifact("image-preprocess/1/model.onnx", _serialized(image_preprocess)),
)


def write_all(repository: Path) -> list[Path]:
    """Write every artifact under `repository`; returns the paths written."""
    written = []
    for artifact in ARTIFACTS:
        target = repository / artifact.relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(artifact.build())
        written.append(target)
    return written
