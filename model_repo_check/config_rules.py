"""Rules about a config on its own that the protobuf schema cannot express.

They follow what Triton core checks at load time, in triton-inference-server/core r24.10
(Triton 2.51): src/model_config_utils.cc ValidateModelConfig (batching, priorities, queue
policies, response cache), NormalizeInstanceGroup and ValidateInstanceGroup, and
src/backend_model_instance.cc GenerateWarmupData; tensors are in io_rules.py, sequence
batching in sequence_rules.py, ensembles in ensemble_rules.py. Errors are what Triton
refuses, with its reason; what it accepts but is still likely a mistake is a warning.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tritonclient.grpc import model_config_pb2

from model_repo_check.backend_rules import check_batch_strategy, check_runtime
from model_repo_check.ensemble_rules import check_ensemble_alone
from model_repo_check.findings import Location, Report
from model_repo_check.io_rules import TENSORRT_PLATFORM, check_io, element_count
from model_repo_check.layout import ModelDir
from model_repo_check.sequence_rules import check_sequence_batching

DataType = model_config_pb2.DataType
Kind = model_config_pb2.ModelInstanceGroup.Kind
QueuePolicy = model_config_pb2.ModelQueuePolicy
# What std::stoi reads of a profile name: leading space, a sign, digits (the rest is ignored).
STOI = re.compile(r"^\s*[+-]?\d+")
# triton::common::GetDataTypeByteSize; TYPE_STRING is variable (0).
BYTE_SIZE = {
    DataType.TYPE_BOOL: 1,
    DataType.TYPE_UINT8: 1,
    DataType.TYPE_UINT16: 2,
    DataType.TYPE_UINT32: 4,
    DataType.TYPE_UINT64: 8,
    DataType.TYPE_INT8: 1,
    DataType.TYPE_INT16: 2,
    DataType.TYPE_INT32: 4,
    DataType.TYPE_INT64: 8,
    DataType.TYPE_FP16: 2,
    DataType.TYPE_FP32: 4,
    DataType.TYPE_FP64: 8,
    DataType.TYPE_BF16: 2,
}


def check_config(model: ModelDir, report: Report) -> None:
    _check_batching(model, report)
    check_ensemble_alone(model, report)
    check_io(model, report)
    check_sequence_batching(model, report)
    _check_transaction_policy(model, report)
    _check_labels(model, report)
    _check_instance_groups(model, report)
    check_runtime(model, report)
    check_batch_strategy(model, report)
    _check_warmup(model, report)


def _check_batching(model: ModelDir, report: Report) -> None:
    config, where = model.config, model.where
    max_batch = config.max_batch_size
    if max_batch < 0:
        report.error(
            "max-batch-size",
            f"'max_batch_size' must be non-negative value for {config.name} (it is {max_batch})",
            where.find("max_batch_size"),
        )
        return
    if not config.HasField("dynamic_batching"):
        return
    if max_batch == 0:
        report.warning(
            "batching-without-batch-size",
            "dynamic_batching is set but max_batch_size is 0: Triton loads it, but this model cannot batch "
            "(set max_batch_size > 0 if the model has a batch dimension, else remove dynamic_batching)",
            where.find("dynamic_batching"),
        )
    _check_preferred(model, config.dynamic_batching.preferred_batch_size, report)
    _check_priorities(model, report)


def _check_preferred(model: ModelDir, sizes: Sequence[int], report: Report) -> None:
    max_batch, name = model.config.max_batch_size, model.config.name
    for i, size in enumerate(sizes):
        at = model.where.find("dynamic_batching", "preferred_batch_size", i)
        if size <= 0:
            report.error("preferred-batch-size", f"dynamic batching preferred size must be positive for {name}", at)
        elif size > max_batch:
            report.error(
                "preferred-batch-size",
                f"dynamic batching preferred size must be <= max batch size for {name} ({size} > {max_batch})",
                at,
            )


def _check_priorities(model: ModelDir, report: Report) -> None:
    """Priority levels, queue policies and preserve_ordering (ValidateModelConfig)."""
    batching, name, where = model.config.dynamic_batching, model.config.name, model.where
    levels = batching.priority_levels
    if levels != 0:
        if not 1 <= batching.default_priority_level <= levels:
            report.error(
                "priority-level",
                f"default priority level must be in range [1, {levels}] for {name} "
                f"(it is {batching.default_priority_level})",
                where.find("dynamic_batching", "default_priority_level"),
            )
        for level in sorted(batching.priority_queue_policy):
            if not 1 <= level <= levels:
                report.error(
                    "priority-level",
                    f"priority queue policy must have priority level in range [1, {levels}] for {name} "
                    f"(it has {level})",
                    where.find("dynamic_batching", "priority_queue_policy"),
                )
    if not batching.preserve_ordering:
        return
    if levels > 1:
        report.error(
            "preserve-ordering",
            f"Only one priority level is allowed when 'preserve_ordering' is true for {name}",
            where.find("dynamic_batching", "priority_levels"),
        )
    policies = [("default_queue_policy", batching.default_queue_policy)] + [
        ("priority_queue_policy", policy) for _, policy in sorted(batching.priority_queue_policy.items())
    ]
    for field, policy in policies:
        if policy.default_timeout_microseconds != 0 and policy.timeout_action == QueuePolicy.DELAY:
            report.error(
                "preserve-ordering",
                f"Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for {name}",
                where.find("dynamic_batching", field),
            )


def _check_transaction_policy(model: ModelDir, report: Report) -> None:
    config = model.config
    if config.model_transaction_policy.decoupled and config.response_cache.enable:
        report.error(
            "response-cache",
            f"Response Cache does not currently support model {config.name} with 'decoupled' transaction policy. "
            "Please disable the response cache.",
            model.where.find("response_cache"),
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
    """NormalizeInstanceGroup then ValidateInstanceGroup (ensembles have none: ensemble_rules.py)."""
    config = model.config
    if config.platform == "ensemble":
        return
    platform = config.platform or (TENSORRT_PLATFORM if config.backend == "tensorrt" else "")
    for i, group in enumerate(config.instance_group):
        label = f"instance group {group.name or config.name + '_' + str(i)} of model {config.name}"
        if group.kind in (Kind.KIND_CPU, Kind.KIND_MODEL) and group.gpus:
            report.error(
                "cpu-group-with-gpus",
                f"{label} has kind {Kind.Name(group.kind)} but specifies one or more GPUs ({list(group.gpus)})",
                model.where.find("instance_group", i, "gpus"),
            )
        if group.kind in (Kind.KIND_GPU, Kind.KIND_AUTO) and (negative := [g for g in group.gpus if g < 0]):
            # CUDA device ids start at 0: no node has GPU -1. Triton refuses a KIND_GPU group with an id
            # outside the GPUs it found; KIND_AUTO becomes KIND_GPU on a GPU host (the same refusal) and
            # KIND_CPU elsewhere, which is refused for listing gpus at all (measured in the corpus).
            report.error(
                "gpu-id-negative",
                f"{label} specifies invalid or unsupported gpu id {negative[0]}: GPU ids are CUDA device "
                "indices, 0 and up",
                model.where.find("instance_group", i, "gpus"),
            )
        elif group.kind == Kind.KIND_AUTO and group.gpus:
            report.warning(
                "auto-group-with-gpus",
                f"{label} is KIND_AUTO and lists gpus {list(group.gpus)}: where any of them is missing Triton makes "
                "it KIND_CPU and then refuses it, as a KIND_CPU group that specifies GPUs",
                model.where.find("instance_group", i, "gpus"),
            )
        if group.count < 0:
            report.warning(
                "instance-count",
                f"instance_group {i} count is {group.count}; Triton replaces a count below 1 with its default "
                "(1, or 2 on KIND_CPU for onnxruntime and tensorflow): write the count you mean",
                model.where.find("instance_group", i, "count"),
            )
        for p, profile in enumerate(group.profile):
            at = model.where.find("instance_group", i, "profile", p)
            if platform != TENSORRT_PLATFORM:
                report.error(
                    "instance-profile",
                    f"{label} and platform {config.platform} specifies profile field which is only supported for "
                    "TensorRT models",
                    at,
                )
                break
            if not profile:
                report.error("instance-profile", "profile name must not be empty", at)
            elif (match := STOI.match(profile)) is None:
                report.error("instance-profile", f"unable to parse '{profile}': stoi", at)
            elif int(match.group()) < 0:
                report.error(
                    "instance-profile",
                    f"{label} and platform {config.platform} specifies invalid profile {profile}. The field should "
                    "contain the string representation of a non-negative integer.",
                    at,
                )


def _check_warmup(model: ModelDir, report: Report) -> None:
    """TritonModelInstance::GenerateWarmupData and the request checks each sample goes through
    (InferenceRequest::Normalize, src/infer_request.cc); ensembles have no warmup (ensemble_rules.py)."""
    config = model.config
    if config.platform == "ensemble":
        return
    for w, warmup in enumerate(config.model_warmup):
        label = f"warmup sample '{warmup.name}'"
        at = model.where.find("model_warmup", w, "inputs")
        if warmup.batch_size == 0:
            report.warning(
                "warmup-batch-size",
                f"{label} has batch_size 0: Triton skips it, so it warms nothing up",
                model.where.find("model_warmup", w, "batch_size"),
            )
            continue
        if _warmup_data_problems(model, label, warmup, at, report):
            continue
        _check_warmup_request(model, label, warmup, at, report)
        # Every C++ backend fails a batch larger than max_batch_size (backend_common; the N samples of a
        # warmup run as one batch of N requests of batch 1).
        limit = max(config.max_batch_size, 1)
        if warmup.batch_size > limit:
            report.error(
                "warmup-batch-size",
                f"{label}: batch size {warmup.batch_size} for '{config.name}', max allowed is {config.max_batch_size} "
                "(the backend refuses the warmup batch)",
                model.where.find("model_warmup", w, "batch_size"),
            )


def _warmup_data_problems(
    model: ModelDir, label: str, warmup: model_config_pb2.ModelWarmup, at: Location, report: Report
) -> bool:
    """The first pass over the samples' inputs: every size known, every input with data. True on an error."""
    for name, sample in sorted(warmup.inputs.items()):
        if element_count(sample.dims) == -1:
            report.error(
                "warmup-input",
                f"{label}: warmup setting expects all variable-size dimensions are specified for input '{name}'",
                at,
            )
            return True
    for name, sample in sorted(warmup.inputs.items()):
        source = sample.WhichOneof("input_data_type")
        if source is None:
            report.error(
                "warmup-input", f"{label}: warmup setting expects input '{name}' to have input_data_type set", at
            )
            return True
        if source != "input_data_file":
            continue
        path = model.path / "warmup" / sample.input_data_file
        if not path.is_file():
            report.error("warmup-input", f"{label}: input '{name}' reads '{path}', which does not exist", at)
            return True
        size = max(element_count(sample.dims), 0) * BYTE_SIZE.get(sample.data_type, 0)
        if sample.data_type != DataType.TYPE_STRING and size > path.stat().st_size:
            report.error(
                "warmup-input",
                f"{label}: warmup setting expects {size} bytes, but the data provided from "
                f"{sample.input_data_file} only has {path.stat().st_size} bytes",
                at,
            )
            return True
    return False


def _check_warmup_request(
    model: ModelDir, label: str, warmup: model_config_pb2.ModelWarmup, at: Location, report: Report
) -> None:
    config = model.config
    inputs = {}
    for tensor in config.input:
        inputs.setdefault(tensor.name, tensor)
    fed = [name for name in warmup.inputs if name in inputs]
    required = sum(not tensor.optional for tensor in config.input)
    if len(fed) > len(config.input) or len(fed) < required:
        missing = sorted(name for name, tensor in inputs.items() if not tensor.optional and name not in warmup.inputs)
        report.error(
            "warmup-input",
            f"{label}: expected {len(config.input)} inputs but got {len(fed)} inputs for model '{config.name}', "
            f"missing required input(s) {missing}",
            at,
        )
        return
    for name in sorted(set(warmup.inputs) - set(inputs)):
        report.warning(
            "warmup-input",
            f"{label} feeds '{name}', which is not a config input: Triton passes it to the backend as it is",
            at,
        )
    for name in sorted(fed):
        sample, tensor = warmup.inputs[name], inputs[name]
        if sample.data_type != tensor.data_type:
            report.error(
                "warmup-input",
                f"{label}: inference input '{name}' data-type is {DataType.Name(sample.data_type)}, but model "
                f"'{config.name}' expects {DataType.Name(tensor.data_type)}",
                at,
            )
            return
        dims, given = list(tensor.dims), list(sample.dims)
        if tensor.is_shape_tensor and config.max_batch_size:
            given = [1, *given]  # a shape tensor keeps the batch dimension the sample is given
        if len(dims) != len(given) or any(d not in (-1, g) for d, g in zip(dims, given, strict=True)):
            batch = "[-1] + " if config.max_batch_size else ""
            report.error(
                "warmup-input",
                f"{label}: unexpected shape for input '{name}' for model '{config.name}'. Expected {batch}{dims}, "
                f"got {given} (a warmup sample's dims leave out the batch dimension)",
                at,
            )
            return
