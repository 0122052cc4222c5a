"""Rules about a config on its own that the protobuf schema cannot express.

They mirror what Triton checks at load time (batching, dims, warmup, labels), so the
mistake shows up here with the line it was written on instead of in a pod's log.
"""

from __future__ import annotations

from collections.abc import Sequence

from tritonclient.grpc import model_config_pb2

from model_repo_check.findings import Location, Report
from model_repo_check.layout import ModelDir

DataType = model_config_pb2.DataType
Kind = model_config_pb2.ModelInstanceGroup.Kind


def check_config(model: ModelDir, report: Report) -> None:
    _check_batching(model, report)
    _check_tensors(model, report)
    _check_labels(model, report)
    _check_instance_groups(model, report)
    _check_warmup(model, report)


def _check_batching(model: ModelDir, report: Report) -> None:
    config, where = model.config, model.where
    max_batch = config.max_batch_size
    if max_batch < 0:
        report.error(
            "max-batch-size", f"max_batch_size is {max_batch}; it must be 0 or more", where.find("max_batch_size")
        )
        return
    if config.sequence_batching.HasField("oldest"):
        oldest = config.sequence_batching.oldest
        _check_preferred(model, ("sequence_batching", "oldest"), oldest.preferred_batch_size, report)
    if not config.HasField("dynamic_batching"):
        return
    if max_batch == 0:
        report.error(
            "batching-without-batch-size",
            "dynamic_batching is set but max_batch_size is 0: this model cannot batch "
            "(set max_batch_size > 0 if the model has a batch dimension, else remove dynamic_batching)",
            where.find("dynamic_batching"),
        )
        return
    _check_preferred(model, ("dynamic_batching",), config.dynamic_batching.preferred_batch_size, report)


def _check_preferred(model: ModelDir, scope: tuple[str, ...], sizes: Sequence[int], report: Report) -> None:
    max_batch = model.config.max_batch_size
    for i, size in enumerate(sizes):
        if not 0 < size <= max_batch:
            report.error(
                "preferred-batch-size",
                f"{'.'.join(scope)} preferred_batch_size {size} is outside 1..max_batch_size ({max_batch})",
                model.where.find(*scope, "preferred_batch_size", i),
            )


def _check_tensors(model: ModelDir, report: Report) -> None:
    config, where = model.config, model.where
    if config.platform != "ensemble" and not config.input:
        report.error("no-inputs", "config declares no input", Location(model.config_path, 1, 1))
    if config.platform != "ensemble" and not config.output:
        report.error("no-outputs", "config declares no output", Location(model.config_path, 1, 1))
    for kind, tensors in (("input", config.input), ("output", config.output)):
        seen: set[str] = set()
        for i, tensor in enumerate(tensors):
            if tensor.name in seen:
                report.error(
                    "duplicate-tensor", f"{kind} '{tensor.name}' is declared twice", where.find(kind, i, "name")
                )
            seen.add(tensor.name)
            if tensor.data_type == DataType.TYPE_INVALID:
                report.error("data-type", f"{kind} '{tensor.name}' has no data_type", where.find(kind, i))
            if not tensor.dims:
                report.error("dims-value", f"{kind} '{tensor.name}' has no dims", where.find(kind, i))
            elif any(d == 0 or d < -1 for d in tensor.dims):
                report.error(
                    "dims-value",
                    f"{kind} '{tensor.name}' dims {list(tensor.dims)}: each dim is -1 (dynamic) or positive",
                    where.find(kind, i, "dims"),
                )


def _check_labels(model: ModelDir, report: Report) -> None:
    for i, output in enumerate(model.config.output):
        if output.label_filename and not (model.path / output.label_filename).is_file():
            report.error(
                "missing-labels",
                f"output '{output.name}' names label_filename '{output.label_filename}', which is not in {model.path}",
                model.where.find("output", i, "label_filename"),
            )


def _check_instance_groups(model: ModelDir, report: Report) -> None:
    for i, group in enumerate(model.config.instance_group):
        if group.kind in (Kind.KIND_CPU, Kind.KIND_MODEL) and group.gpus:
            report.error(
                "cpu-group-with-gpus",
                f"instance_group {i} is {Kind.Name(group.kind)} but lists gpus {list(group.gpus)}",
                model.where.find("instance_group", i, "gpus"),
            )
        if group.count < 0:
            report.error(
                "instance-count",
                f"instance_group {i} count is {group.count}; it must be positive (0 or unset means 1)",
                model.where.find("instance_group", i, "count"),
            )


def _check_warmup(model: ModelDir, report: Report) -> None:
    config, where = model.config, model.where
    inputs = {tensor.name: tensor for tensor in config.input}
    for w, warmup in enumerate(config.model_warmup):
        label = f"model_warmup '{warmup.name or w}'"
        limit = config.max_batch_size or 1
        if not 1 <= warmup.batch_size <= limit:
            report.error(
                "warmup-batch-size",
                f"{label} batch_size {warmup.batch_size} is outside 1..{limit}"
                + (" (max_batch_size 0: the model takes one request at a time)" if not config.max_batch_size else ""),
                where.find("model_warmup", w, "batch_size"),
            )
        for name in sorted(set(inputs) - set(warmup.inputs)):
            if not inputs[name].optional:
                report.error("warmup-input", f"{label} does not feed input '{name}'", where.find("model_warmup", w))
        for name, sample in sorted(warmup.inputs.items()):
            at = where.find("model_warmup", w, "inputs")
            if name not in inputs:
                report.error("warmup-input", f"{label} feeds '{name}', which is not a config input", at)
                continue
            _check_warmup_input(model, label, name, sample, inputs[name], at, report)


def _check_warmup_input(
    model: ModelDir,
    label: str,
    name: str,
    sample: model_config_pb2.ModelWarmup.Input,
    tensor: model_config_pb2.ModelInput,
    at: Location,
    report: Report,
) -> None:
    if sample.data_type != tensor.data_type:
        report.error(
            "warmup-input",
            f"{label} input '{name}' is {DataType.Name(sample.data_type)}, the config input is "
            f"{DataType.Name(tensor.data_type)}",
            at,
        )
    dims = list(tensor.dims)
    fits = zip(dims, sample.dims, strict=False)
    concrete = len(sample.dims) == len(dims) and all(d in (-1, s) and s > 0 for d, s in fits)
    if not concrete:
        report.error(
            "warmup-input",
            f"{label} input '{name}' dims {list(sample.dims)} do not fit the config dims {dims} "
            "(same rank, every -1 given a positive size, no batch dimension)",
            at,
        )
    source = sample.WhichOneof("input_data_type")
    if source is None:
        report.error("warmup-input", f"{label} input '{name}' sets none of zero_data, random_data, input_data_file", at)
    elif source == "input_data_file" and not (model.path / "warmup" / sample.input_data_file).is_file():
        report.error(
            "warmup-input",
            f"{label} input '{name}' reads '{sample.input_data_file}', which is not in {model.path / 'warmup'}",
            at,
        )
