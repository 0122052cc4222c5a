"""The ONNX graphs of quickstart/ (Triton's quick-start models), deterministic like the examples.

`build(target)` copies quickstart/*/config.pbtxt into `target` and writes each model's
1/model.onnx beside it. The graphs are small stand-ins with the inputs, outputs, data types
and shapes their configs declare; Triton's originals are TensorFlow graphs or custom backends.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from model_repo_check.example_models import finish_model

SOURCE = Path(__file__).with_name("quickstart")
BATCH = "batch"


def _io(name: str, elem_type: int, *dims: int | str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, [BATCH, *dims])


def simple() -> onnx.ModelProto:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 over [batch, 16]."""
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        "simple",
        [_io("INPUT0", TensorProto.INT32, 16), _io("INPUT1", TensorProto.INT32, 16)],
        [_io("OUTPUT0", TensorProto.INT32, 16), _io("OUTPUT1", TensorProto.INT32, 16)],
    )
    return finish_model(graph, "Triton's simple example: sum and difference.")


def simple_string() -> onnx.ModelProto:
    """simple, with the numbers as strings: parsed to INT32, added and subtracted, printed back."""
    cast = [helper.make_node("Cast", [f"INPUT{i}"], [f"N{i}"], to=TensorProto.INT32) for i in (0, 1)]
    graph = helper.make_graph(
        [
            *cast,
            helper.make_node("Add", ["N0", "N1"], ["SUM"]),
            helper.make_node("Sub", ["N0", "N1"], ["DIFF"]),
            helper.make_node("Cast", ["SUM"], ["OUTPUT0"], to=TensorProto.STRING),
            helper.make_node("Cast", ["DIFF"], ["OUTPUT1"], to=TensorProto.STRING),
        ],
        "simple_string",
        [_io("INPUT0", TensorProto.STRING, 16), _io("INPUT1", TensorProto.STRING, 16)],
        [_io("OUTPUT0", TensorProto.STRING, 16), _io("OUTPUT1", TensorProto.STRING, 16)],
    )
    return finish_model(graph, "Triton's simple_string example: sum and difference of numbers as strings.")


def simple_identity() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "simple_identity",
        [_io("INPUT0", TensorProto.STRING, "length")],
        [_io("OUTPUT0", TensorProto.STRING, "length")],
    )
    return finish_model(graph, "Triton's simple_identity example: strings back unchanged.")


def simple_sequence() -> onnx.ModelProto:
    """OUTPUT = (INPUT + START) * READY; Triton's original accumulates, this one needs no state."""
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT", "START"], ["STARTED"]),
            helper.make_node("Mul", ["STARTED", "READY"], ["OUTPUT"]),
        ],
        "simple_sequence",
        [_io(name, TensorProto.INT32, 1) for name in ("INPUT", "START", "READY")],
        [_io("OUTPUT", TensorProto.INT32, 1)],
    )
    return finish_model(graph, "Triton's simple_sequence example, without its state.")


def simple_dyna_sequence() -> onnx.ModelProto:
    """OUTPUT = INPUT * READY + START + END + int32(CORRID): every control reaches the output."""
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["INPUT", "READY"], ["READY_INPUT"]),
            helper.make_node("Add", ["READY_INPUT", "START"], ["WITH_START"]),
            helper.make_node("Add", ["WITH_START", "END"], ["WITH_END"]),
            helper.make_node("Cast", ["CORRID"], ["CORRID32"], to=TensorProto.INT32),
            helper.make_node("Add", ["WITH_END", "CORRID32"], ["OUTPUT"]),
        ],
        "simple_dyna_sequence",
        [
            *(_io(name, TensorProto.INT32, 1) for name in ("INPUT", "START", "END", "READY")),
            _io("CORRID", TensorProto.UINT64, 1),
        ],
        [_io("OUTPUT", TensorProto.INT32, 1)],
    )
    return finish_model(graph, "Triton's simple_dyna_sequence example, without its state.")


def simple_state() -> onnx.ModelProto:
    """OUTPUT_STATE = INPUT (at START) or INPUT_STATE + INPUT; OUTPUT = the state summed."""
    axes = helper.make_tensor("AXES", TensorProto.INT64, [1], [1])
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT_STATE", "INPUT"], ["ADDED"]),
            helper.make_node("Where", ["START", "INPUT", "ADDED"], ["OUTPUT_STATE"]),
            helper.make_node("ReduceSum", ["OUTPUT_STATE", "AXES"], ["OUTPUT"], keepdims=1),
        ],
        "simple_state",
        [
            _io("INPUT", TensorProto.INT32, 1),
            _io("START", TensorProto.BOOL, 1),
            _io("INPUT_STATE", TensorProto.INT32, "state"),
        ],
        [_io("OUTPUT", TensorProto.INT32, 1), _io("OUTPUT_STATE", TensorProto.INT32, "state")],
        initializer=[axes],
    )
    return finish_model(graph, "An accumulator with implicit state.")


BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "simple": simple,
    "simple_string": simple_string,
    "simple_identity": simple_identity,
    "simple_sequence": simple_sequence,
    "simple_dyna_sequence": simple_dyna_sequence,
    "simple_state": simple_state,
}


def build(target: Path) -> Path:
    """A repository of every quick-start model under `target`; returns `target`."""
    for name, builder in BUILDERS.items():
        (target / name / "1").mkdir(parents=True, exist_ok=True)
        shutil.copy2(SOURCE / name / "config.pbtxt", target / name / "config.pbtxt")
        (target / name / "1/model.onnx").write_bytes(builder().SerializeToString(deterministic=True))
    return target
