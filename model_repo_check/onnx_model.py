"""An ONNX model against its config: tensor names, dtypes, shapes, then a smoke inference.

Shapes compare the way Triton's onnxruntime backend does: the config shape is the batch
dimension (when max_batch_size > 0) followed by `dims` (or `reshape`), and a -1 in the
config needs a dynamic axis in the model, while a dynamic axis accepts any config value.
A sequence model also gets the control inputs of `sequence_batching.control_input` (shape
[1] after the batch dimension, as Triton's onnxruntime backend requires) and the inputs of its
implicit states (`sequence_batching.state`), which the config does not list under `input`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from google.protobuf.message import DecodeError
from onnx import TensorProto
from tritonclient.grpc import model_config_pb2

from model_repo_check.findings import Location, Report
from model_repo_check.layout import ModelDir

DataType = model_config_pb2.DataType
Control = model_config_pb2.ModelSequenceBatching.Control
ONNX_TO_TRITON = {
    TensorProto.BOOL: DataType.TYPE_BOOL,
    TensorProto.UINT8: DataType.TYPE_UINT8,
    TensorProto.UINT16: DataType.TYPE_UINT16,
    TensorProto.UINT32: DataType.TYPE_UINT32,
    TensorProto.UINT64: DataType.TYPE_UINT64,
    TensorProto.INT8: DataType.TYPE_INT8,
    TensorProto.INT16: DataType.TYPE_INT16,
    TensorProto.INT32: DataType.TYPE_INT32,
    TensorProto.INT64: DataType.TYPE_INT64,
    TensorProto.FLOAT16: DataType.TYPE_FP16,
    TensorProto.FLOAT: DataType.TYPE_FP32,
    TensorProto.DOUBLE: DataType.TYPE_FP64,
    TensorProto.STRING: DataType.TYPE_STRING,
    TensorProto.BFLOAT16: DataType.TYPE_BF16,
}
TRITON_TO_NUMPY = {
    DataType.TYPE_BOOL: np.bool_,
    DataType.TYPE_UINT8: np.uint8,
    DataType.TYPE_UINT16: np.uint16,
    DataType.TYPE_UINT32: np.uint32,
    DataType.TYPE_UINT64: np.uint64,
    DataType.TYPE_INT8: np.int8,
    DataType.TYPE_INT16: np.int16,
    DataType.TYPE_INT32: np.int32,
    DataType.TYPE_INT64: np.int64,
    DataType.TYPE_FP16: np.float16,
    DataType.TYPE_FP32: np.float32,
    DataType.TYPE_FP64: np.float64,
    DataType.TYPE_STRING: np.object_,
}
NUMPY_TO_TRITON = {numpy_type: triton for triton, numpy_type in TRITON_TO_NUMPY.items()}
# onnxruntime names element types the way ONNX does, in lower case: tensor(float), tensor(bfloat16), ...
ORT_TO_TRITON = {f"tensor({TensorProto.DataType.Name(o).lower()})": t for o, t in ONNX_TO_TRITON.items()}
# The string every element of a TYPE_STRING smoke input holds. Triton's own zero_data warmup sends
# empty strings; "0" also suits models that parse numbers (Triton's simple_string example does).
SMOKE_STRING = "0"
Tensor = model_config_pb2.ModelInput | model_config_pb2.ModelOutput
Signature = dict[str, tuple[int, list[int]]]


@dataclass(frozen=True)
class SequenceInput:
    """An input Triton feeds a sequence model besides config.input: a control or an implicit state."""

    name: str
    data_type: int
    dims: list[int]
    field: tuple[str | int, ...]  # where FieldLocations finds it


def sequence_inputs(model: ModelDir) -> tuple[list[SequenceInput], list[SequenceInput]]:
    """(controls, states) of `sequence_batching`. A control tensor has dims [1] and the data type
    its `*_false_true` (or, for CORRID, its `data_type`) implies."""
    batching = model.config.sequence_batching
    controls = [
        SequenceInput(entry.name, _control_type(entry.control[0]), [1], ("sequence_batching", "control_input", i))
        for i, entry in enumerate(batching.control_input)
        if entry.control
    ]
    states = [
        SequenceInput(state.input_name, state.data_type, list(state.dims), ("sequence_batching", "state", i))
        for i, state in enumerate(batching.state)
    ]
    return controls, states


def _control_type(control: model_config_pb2.ModelSequenceBatching.Control) -> int:
    if control.kind == Control.CONTROL_SEQUENCE_CORRID:
        return control.data_type
    if control.fp32_false_true:
        return DataType.TYPE_FP32
    if control.bool_false_true:
        return DataType.TYPE_BOOL
    return DataType.TYPE_INT32


def onnx_path(model: ModelDir, version_dir: Path) -> Path:
    """The .onnx file of a version; a model.onnx folder (external data) holds a model.onnx inside."""
    path = version_dir / (model.model_file or "model.onnx")
    return path / "model.onnx" if path.is_dir() else path


def check_onnx_version(model: ModelDir, version: int, path: Path, report: Report) -> None:
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except (DecodeError, OSError, ValueError) as err:
        report.error("onnx-load", f"version {version}: cannot read the ONNX model: {err}", Location(path))
        return
    graph = proto.graph
    initialised = {init.name for init in graph.initializer}
    inputs = _signature([vi for vi in graph.input if vi.name not in initialised])
    outputs = _signature(list(graph.output))
    controls, states = sequence_inputs(model)
    before = len(report.errors)
    _compare("input", model, version, model.config.input, inputs, report)
    _compare("output", model, version, model.config.output, outputs, report)
    _compare_controls(model, version, controls, inputs, report)
    fed = {t.name for t in model.config.input} | {s.name for s in (*controls, *states)}
    for name in sorted(set(inputs) - fed):
        report.error(
            "input-name",
            f"version {version}: input '{name}' of the ONNX model is not declared in the config"
            + (" (nor as a sequence control or state)" if model.config.HasField("sequence_batching") else ""),
            model.where.find("input"),
        )
    if len(report.errors) == before:
        _smoke(model, version, path, [*controls, *states], report)


def _signature(values: Sequence[onnx.ValueInfoProto]) -> Signature:
    found: Signature = {}
    for value in values:
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
        found[value.name] = (tensor.elem_type, dims)
    return found


def config_shape(model: ModelDir, tensor: Tensor | SequenceInput) -> list[int]:
    """The full shape the model sees: batch dimension first when the model batches."""
    if isinstance(tensor, SequenceInput):
        dims = tensor.dims
    else:
        dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
    return ([-1] if model.config.max_batch_size > 0 else []) + dims


def _compare(
    kind: str, model: ModelDir, version: int, declared: Sequence[Tensor], actual: Signature, report: Report
) -> None:
    where, prefix = model.where, f"version {version}: {kind}"
    for i, tensor in enumerate(declared):
        if tensor.name not in actual:
            names = ", ".join(sorted(actual)) or "none"
            report.error(
                f"{kind}-name",
                f"{prefix} '{tensor.name}' is not in the ONNX model (its {kind}s: {names})",
                where.find(kind, i, "name"),
            )
            continue
        elem_type, model_dims = actual[tensor.name]
        expected = ONNX_TO_TRITON.get(elem_type, DataType.TYPE_INVALID)
        if tensor.data_type != expected:
            report.error(
                f"{kind}-dtype",
                f"{prefix} '{tensor.name}' is {DataType.Name(tensor.data_type)} in the config, "
                f"{DataType.Name(expected)} ({TensorProto.DataType.Name(elem_type)}) in the ONNX model",
                where.find(kind, i, "data_type"),
            )
        problem = _shape_problem(model, tensor, model_dims)
        if problem:
            report.error(f"{kind}-shape", f"{prefix} '{tensor.name}': {problem}", where.find(kind, i, "dims"))


def _compare_controls(
    model: ModelDir, version: int, controls: list[SequenceInput], actual: Signature, report: Report
) -> None:
    """What Triton's onnxruntime backend checks of each control: the model has the input, its
    dims after the batch dimension are exactly [1], and its data type is the control's."""
    prefix = f"version {version}: sequence control"
    for control in controls:
        at = model.where.find(*control.field, "name")
        if control.name not in actual:
            report.error("input-name", f"{prefix} '{control.name}' is not an input of the ONNX model", at)
            continue
        elem_type, model_dims = actual[control.name]
        debatched = model_dims[1:] if model.config.max_batch_size > 0 else model_dims
        if debatched != [1]:
            report.error(
                "input-shape",
                f"{prefix} '{control.name}' has dims {debatched} in the model (after the batch dimension); "
                "Triton feeds a control as [1]",
                at,
            )
        expected = ONNX_TO_TRITON.get(elem_type, DataType.TYPE_INVALID)
        if control.data_type != expected:
            report.error(
                "input-dtype",
                f"{prefix} '{control.name}' is {DataType.Name(control.data_type)} in the config, "
                f"{DataType.Name(expected)} ({TensorProto.DataType.Name(elem_type)}) in the ONNX model",
                at,
            )


def _shape_problem(model: ModelDir, tensor: Tensor, model_dims: list[int]) -> str | None:
    max_batch, dims = model.config.max_batch_size, list(tensor.dims)
    shape = config_shape(model, tensor)
    if max_batch > 0 and model_dims and model_dims[0] != -1 and len(model_dims) == len(shape) - 1:
        return (
            f"max_batch_size is {max_batch} but the model has no batch dimension (its shape {model_dims}); "
            "set max_batch_size: 0 or export the model with a dynamic first axis"
        )
    if max_batch > 0 and model_dims and model_dims[0] != -1:
        return f"max_batch_size is {max_batch} but the model's first axis is fixed at {model_dims[0]}, not a batch axis"
    if max_batch > 0 and len(model_dims) == len(dims) and dims and dims[0] == -1:
        return (
            f"dims {dims} include the batch dimension; Triton prepends it when max_batch_size > 0, "
            f"write dims: {dims[1:]}"
        )
    if len(shape) != len(model_dims):
        hint = ""
        if max_batch == 0 and len(model_dims) == len(shape) + 1 and model_dims[0] == -1:
            hint = f"; the model has a batch axis: set max_batch_size > 0, or dims: {[-1, *dims]}"
        return f"config shape {shape} has rank {len(shape)}, the model's {model_dims} has rank {len(model_dims)}{hint}"
    for axis, (want, have) in enumerate(zip(shape, model_dims, strict=True)):
        if have != -1 and want != have:
            hint = " (the model axis is fixed: write its size, -1 only for dynamic axes)" if want == -1 else ""
            return f"axis {axis} is {want} in the config shape {shape}, {have} in the model {model_dims}{hint}"
    return None


def _smoke_input(model: ModelDir, tensor: Tensor | SequenceInput) -> np.ndarray | onnxruntime.OrtValue:
    """Zeros of the tensor's full shape (batch 1, every -1 as 1). Strings are an object array of
    str: onnxruntime's Python API turns a bytes element into its repr ("b'0'"), measured with
    onnxruntime 1.32. bfloat16 has no numpy type: an OrtValue over uint16 zeros carries it."""
    shape = [1 if d == -1 else d for d in config_shape(model, tensor)]
    if tensor.data_type == DataType.TYPE_STRING:
        return np.full(shape, SMOKE_STRING, dtype=object)
    if tensor.data_type == DataType.TYPE_BF16:
        return onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(
            np.zeros(shape, dtype=np.uint16), TensorProto.BFLOAT16
        )
    return np.zeros(shape, dtype=TRITON_TO_NUMPY[tensor.data_type])


def _run(
    session: onnxruntime.InferenceSession, names: list[str], feeds: dict[str, np.ndarray | onnxruntime.OrtValue]
) -> dict[str, tuple[int, list[int]]]:
    """Each output's (Triton data type, shape). onnxruntime's Python API makes no OrtValue of
    strings and no numpy array of bfloat16: with string inputs the outputs come back as numpy
    arrays (so a bfloat16 output fails there, onnxruntime says why), otherwise as OrtValues."""
    if any(isinstance(value, np.ndarray) and value.dtype == object for value in feeds.values()):
        arrays = session.run(names, feeds)
        return {
            n: (NUMPY_TO_TRITON.get(a.dtype.type, DataType.TYPE_INVALID), list(a.shape))
            for n, a in zip(names, arrays, strict=True)
        }
    values = {
        name: value if isinstance(value, onnxruntime.OrtValue) else onnxruntime.OrtValue.ortvalue_from_numpy(value)
        for name, value in feeds.items()
    }
    results = session.run_with_ort_values(names, values)
    return {
        n: (ORT_TO_TRITON.get(r.data_type(), DataType.TYPE_INVALID), r.shape())
        for n, r in zip(names, results, strict=True)
    }


def _smoke(model: ModelDir, version: int, path: Path, extra: list[SequenceInput], report: Report) -> None:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    try:
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        feeds = {t.name: _smoke_input(model, t) for t in (*model.config.input, *extra)}
        results = _run(session, [t.name for t in model.config.output], feeds)
    except Exception as err:  # onnxruntime's own error classes (Fail, InvalidArgument, ...) derive from Exception
        report.error("smoke-inference", f"version {version}: onnxruntime failed on zero inputs: {err}", Location(path))
        return
    for i, tensor in enumerate(model.config.output):
        got_type, got_shape = results[tensor.name]
        want = config_shape(model, tensor)
        if model.config.max_batch_size > 0:
            want[0] = 1
        shape_ok = len(got_shape) == len(want) and all(w in (-1, g) for w, g in zip(want, got_shape, strict=True))
        if got_type != tensor.data_type or not shape_ok:
            report.error(
                "smoke-output",
                f"version {version}: output '{tensor.name}' came back {DataType.Name(got_type)}{got_shape} from zero "
                f"inputs, the config declares {DataType.Name(tensor.data_type)}{want}",
                model.where.find("output", i, "dims"),
            )
