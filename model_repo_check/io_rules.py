"""Inputs and outputs of a config, as Triton core checks them before it hands the model to a
backend (it does with --disable-auto-complete-config, and again in Model::Init).

Each rule follows triton-inference-server/core r24.10 (Triton 2.51), src/model_config_utils.cc:
ValidateIOShape, ValidateModelInput, ValidateModelOutput, ValidateNonLinearFormatIO and
ValidateBatchIO. Messages carry Triton's own reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tritonclient.grpc import model_config_pb2

from model_repo_check.findings import Location, Report
from model_repo_check.layout import ModelDir

DataType = model_config_pb2.DataType
BatchInput = model_config_pb2.BatchInput
BatchOutput = model_config_pb2.BatchOutput
ModelInput = model_config_pb2.ModelInput
Tensor = model_config_pb2.ModelInput | model_config_pb2.ModelOutput
WILDCARD = -1
TENSORRT_PLATFORM = "tensorrt_plan"
ONE_SOURCE_KINDS = frozenset(
    {
        BatchInput.BATCH_ELEMENT_COUNT,
        BatchInput.BATCH_ACCUMULATED_ELEMENT_COUNT,
        BatchInput.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO,
        BatchInput.BATCH_MAX_ELEMENT_COUNT_AS_SHAPE,
        BatchInput.BATCH_ITEM_SHAPE,
        BatchInput.BATCH_ITEM_SHAPE_FLATTEN,
    }
)


def element_count(dims: Sequence[int]) -> int:
    """triton::common::GetElementCount: -1 when any dim is variable, else the product, 0 for []."""
    return -1 if WILDCARD in dims else (math.prod(dims) if dims else 0)


def check_io(model: ModelDir, report: Report) -> None:
    config = model.config
    for kind, tensors in (("input", config.input), ("output", config.output)):
        seen: set[str] = set()
        for i, tensor in enumerate(tensors):
            _check_shape(model, kind, i, tensor, report)
            _check_formats(model, kind, i, tensor, report)
            if tensor.name and tensor.name in seen:
                # Model::Init keeps the first of two tensors with one name and loads the model.
                report.warning(
                    "duplicate-tensor",
                    f"{kind} '{tensor.name}' is declared twice; Triton uses the first and ignores this one",
                    model.where.find(kind, i, "name"),
                )
            seen.add(tensor.name)
    if config.platform != "ensemble" and not config.input:
        report.warning(
            "no-inputs",
            "config declares no input: Triton core loads it, but a backend that compares the config with the model "
            "refuses it unless the model has none either",
            Location(model.config_path, 1, 1),
        )
    if config.platform != "ensemble" and not config.output:
        report.warning(
            "no-outputs",
            "config declares no output: Triton core loads it, but a backend that compares the config with the model "
            "refuses it unless the model has none either",
            Location(model.config_path, 1, 1),
        )
    _check_batch_io(model, report)


def _check_shape(
    model: ModelDir,
    kind: str,
    i: int,
    tensor: Tensor,
    report: Report,
) -> None:
    """ValidateIOShape: name, data_type, dims, and reshape against dims."""
    where = model.where
    label = f"model {kind} '{tensor.name}'"
    if not tensor.name:
        report.error("tensor-name", f"model {kind} must specify 'name'", where.find(kind, i))
        return
    if tensor.data_type == DataType.TYPE_INVALID:
        report.error("data-type", f"{label} must specify 'data_type'", where.find(kind, i))
        return
    if not tensor.dims:
        report.error("dims-value", f"{label} must specify 'dims'", where.find(kind, i))
        return
    max_batch = model.config.max_batch_size
    if tensor.HasField("reshape") and not tensor.reshape.shape and max_batch == 0:
        report.error(
            "reshape",
            f"{label} cannot have empty reshape for non-batching model as scalar tensors are not supported",
            where.find(kind, i, "reshape"),
        )
        return
    if any(d < 1 and d != WILDCARD for d in tensor.dims):
        report.error(
            "dims-value",
            f"{label} dimension must be integer >= 1, or -1 to indicate a variable-size dimension "
            f"(dims {list(tensor.dims)})",
            where.find(kind, i, "dims"),
        )
        return
    if tensor.HasField("reshape"):
        _check_reshape(model, kind, i, tensor, label, report)


def _check_reshape(
    model: ModelDir,
    kind: str,
    i: int,
    tensor: Tensor,
    label: str,
    report: Report,
) -> None:
    at = model.where.find(kind, i, "reshape")
    dims, shape = list(tensor.dims), list(tensor.reshape.shape)
    if any(d < 1 and d != WILDCARD for d in shape):
        report.error(
            "reshape",
            f"{label} reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension",
            at,
        )
        return
    dims_size, reshape_size = element_count(dims), element_count(shape)
    # An empty reshape (a scalar) expects dims of one element.
    if dims_size != reshape_size and (reshape_size != 0 or dims_size != 1):
        report.error("reshape", f"{label} has different size for dims {dims} and reshape {shape}", at)
        return
    if dims_size == WILDCARD:
        dims_chunks, shape_chunks = _chunks(dims), _chunks(shape)
        if len(dims_chunks) != len(shape_chunks):
            report.error(
                "reshape",
                f"{label} has different number of variable-size dimensions for dims {dims} and reshape {shape}",
                at,
            )
        elif dims_chunks != shape_chunks:
            report.error("reshape", f"{label} has different size for dims {dims} and reshape {shape}", at)


def _chunks(dims: Sequence[int]) -> list[int]:
    """Element counts of the runs between variable-size dimensions: [2, 4, -1, 6] -> [8, 6]."""
    counts, current = [], 1
    for dim in dims:
        if dim == WILDCARD:
            counts.append(current)
            current = 1
        else:
            current *= dim
    return [*counts, current]


def _check_formats(
    model: ModelDir,
    kind: str,
    i: int,
    tensor: Tensor,
    report: Report,
) -> None:
    """ValidateModelInput/Output and ValidateNonLinearFormatIO."""
    platform, where = model.config.platform, model.where
    if kind == "input" and tensor.format in (ModelInput.FORMAT_NHWC, ModelInput.FORMAT_NCHW) and len(tensor.dims) != 3:
        report.error("input-format", "model input NHWC/NCHW require 3 dims", where.find(kind, i, "format"))
    if platform != TENSORRT_PLATFORM and tensor.is_shape_tensor:
        report.error(
            "shape-tensor",
            "shape tensors are only supported for TensorRT platform",
            where.find(kind, i, "is_shape_tensor"),
        )
    if tensor.is_non_linear_format_io:
        at = where.find(kind, i, "is_non_linear_format_io")
        if platform != TENSORRT_PLATFORM:
            report.error("non-linear-format", "Non-linear IO format is only supported for the TensorRT platform", at)
        elif len(tensor.dims) != 3:
            report.error("non-linear-format", f"Non-linear IO format {kind} requires 3 dims", at)


def _check_batch_io(model: ModelDir, report: Report) -> None:
    """ValidateBatchIO: kinds, source counts, data types, sources and targets that exist."""
    config, where = model.config, model.where
    inputs = {tensor.name for tensor in config.input}
    outputs = {tensor.name for tensor in config.output}
    for i, batch in enumerate(config.batch_input):
        at = where.find("batch_input", i)
        kind = BatchInput.Kind.Name(batch.kind)
        if batch.kind not in ONE_SOURCE_KINDS:
            report.error("batch-input", f"unknown batch input kind '{kind}'", at)
        elif len(batch.source_input) != 1:
            report.error(
                "batch-input", f"batch input kind '{kind}' expects 1 source input, got {len(batch.source_input)}", at
            )
        if batch.data_type not in (DataType.TYPE_INT32, DataType.TYPE_FP32):
            report.error("batch-input", "batch input data type must be TYPE_INT32 or TYPE_FP32", at)
        for source in batch.source_input:
            if source not in inputs:
                report.error("batch-input", f"unknown source input name '{source}'", at)
    for i, batch in enumerate(config.batch_output):
        at = where.find("batch_output", i)
        kind = BatchOutput.Kind.Name(batch.kind)
        if batch.kind != BatchOutput.BATCH_SCATTER_WITH_INPUT_SHAPE:
            report.error("batch-output", f"unknown batch output kind '{kind}'", at)
        elif len(batch.source_input) != 1:
            report.error(
                "batch-output", f"batch output kind '{kind}' expects 1 source input, got {len(batch.source_input)}", at
            )
        for source in batch.source_input:
            if source not in inputs:
                report.error("batch-output", f"unknown source input name '{source}'", at)
        targets: set[str] = set()
        for target in batch.target_name:
            if target not in outputs:
                report.error("batch-output", f"unknown target output name '{target}'", at)
            elif target in targets:
                report.error("batch-output", f"target output name '{target}' can only be specified once", at)
            targets.add(target)
