"""An ONNX model against its config: tensor names, dtypes, shapes, then a smoke inference.

Shapes compare the way Triton's onnxruntime backend does: the config shape is the batch
dimension (when max_batch_size > 0) followed by `dims` (or `reshape`), and a -1 in the
config needs a dynamic axis in the model, while a dynamic axis accepts any config value.
"""

from __future__ import annotations

from collections.abc import Sequence
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
Tensor = model_config_pb2.ModelInput | model_config_pb2.ModelOutput
Signature = dict[str, tuple[int, list[int]]]


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
    before = len(report.errors)
    _compare("input", model, version, model.config.input, inputs, report)
    _compare("output", model, version, model.config.output, outputs, report)
    if len(report.errors) == before:
        _smoke(model, version, path, report)


def _signature(values: Sequence[onnx.ValueInfoProto]) -> Signature:
    found: Signature = {}
    for value in values:
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
        found[value.name] = (tensor.elem_type, dims)
    return found


def config_shape(model: ModelDir, tensor: Tensor) -> list[int]:
    """The full shape the model sees: batch dimension first when the model batches."""
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
    if kind == "input":
        for name in sorted(set(actual) - {t.name for t in declared}):
            report.error(
                "input-name",
                f"{prefix} '{name}' of the ONNX model is not declared in the config",
                where.find("input"),
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


def _zeros(model: ModelDir, tensor: model_config_pb2.ModelInput) -> np.ndarray:
    shape = [1 if d == -1 else d for d in config_shape(model, tensor)]
    dtype = TRITON_TO_NUMPY[tensor.data_type]
    return np.full(shape, b"", dtype=object) if dtype is np.object_ else np.zeros(shape, dtype=dtype)


def _smoke(model: ModelDir, version: int, path: Path, report: Report) -> None:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    try:
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        feeds = {t.name: _zeros(model, t) for t in model.config.input}
        names = [t.name for t in model.config.output]
        results = dict(zip(names, session.run(names, feeds), strict=True))
    except Exception as err:  # onnxruntime's own error classes (Fail, InvalidArgument, ...) derive from Exception
        report.error("smoke-inference", f"version {version}: onnxruntime failed on zero inputs: {err}", Location(path))
        return
    for i, tensor in enumerate(model.config.output):
        got = results[tensor.name]
        want_type = TRITON_TO_NUMPY.get(tensor.data_type)
        want = config_shape(model, tensor)
        if model.config.max_batch_size > 0:
            want[0] = 1
        shape_ok = len(got.shape) == len(want) and all(w in (-1, g) for w, g in zip(want, got.shape, strict=True))
        if got.dtype.type is not want_type or not shape_ok:
            report.error(
                "smoke-output",
                f"version {version}: output '{tensor.name}' came back {got.dtype}{list(got.shape)} from zero inputs, "
                f"the config declares {DataType.Name(tensor.data_type)}{want}",
                model.where.find("output", i, "dims"),
            )
