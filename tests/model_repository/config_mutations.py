"""The differential generator: grammar-aware mutations of valid Triton configs.

Each case starts from one of a few valid configs (`SEEDS`: a batching classifier, a
fixed-shape non-batching model, a sequence model, batch inputs and outputs, two ensembles) and
applies one or two mutations (`MUTATIONS`), each of which edits one field family of
model_config.proto on the parsed message: dims, reshape, data types, batching and preferred
sizes, priorities and queue policies, sequence controls, ensembles, instance groups, version
policies, warmup, runtime, response cache, tensor formats. The message is written back with
protobuf's text format, so every case parses; what is judged is Triton's load-time rules.

Models use the tensorrt and pytorch backends: the triton engine serves them with its C stand-in
backend (model_repo_check/stand_in_backend), which loads in milliseconds, so thousands of cases
fit in one server. Ensembles use the members in `MEMBERS`, which every repository holds.

`generate(seed, count)` is deterministic for a seed. A case whose verdict needs what this
machine lacks carries `excluded` with the reason (`EXCLUSIONS`), and is left out of the
comparison (it is still generated, so the sequence of cases does not depend on it).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

Mutation = Callable[[random.Random, mc.ModelConfig], str | None]
DT = mc.DataType
Control = mc.ModelSequenceBatching.Control
Kind = mc.ModelInstanceGroup.Kind
TYPES = [v for v in DT.values() if v != DT.TYPE_INVALID]
VERSIONS = (1, 2)


@dataclass
class Case:
    """One generated model folder: `name` is its folder and config name."""

    name: str
    seed: str
    mutations: list[str]
    config: mc.ModelConfig
    files: dict[str, bytes] = field(default_factory=dict)
    excluded: str | None = None

    def write(self, repository: Path) -> Path:
        folder = repository / self.name
        folder.mkdir(parents=True)
        (folder / "config.pbtxt").write_text(text_format.MessageToString(self.config))
        for relative, data in self.files.items():
            (folder / relative).parent.mkdir(parents=True, exist_ok=True)
            (folder / relative).write_bytes(data)
        return folder

    def describe(self) -> str:
        return f"{self.name} (seed config {self.seed}, mutations: {', '.join(self.mutations) or 'none'})"


def _tensor(message: mc.ModelInput | mc.ModelOutput, name: str, data_type: int, dims: list[int]) -> None:
    message.name, message.data_type = name, data_type
    message.dims.extend(dims)


def _base(name: str, platform: str, max_batch: int) -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, platform=platform, max_batch_size=max_batch)
    return config


def _classifier(name: str) -> mc.ModelConfig:
    config = _base(name, "tensorrt_plan", 8)
    _tensor(config.input.add(), "embedding", DT.TYPE_FP32, [16])
    _tensor(config.input.add(), "mask", DT.TYPE_INT32, [-1])
    _tensor(config.output.add(), "scores", DT.TYPE_FP32, [4])
    config.dynamic_batching.preferred_batch_size.extend([2, 4])
    config.dynamic_batching.max_queue_delay_microseconds = 100
    config.instance_group.add(kind=Kind.KIND_CPU, count=1)
    warmup = config.model_warmup.add(name="zeros", batch_size=2)
    for tensor, dims in (("embedding", [16]), ("mask", [3])):
        sample = warmup.inputs[tensor]
        sample.data_type = DT.TYPE_FP32 if tensor == "embedding" else DT.TYPE_INT32
        sample.dims.extend(dims)
        sample.zero_data = True
    return config


def _fixed(name: str) -> mc.ModelConfig:
    config = _base(name, "pytorch_libtorch", 0)
    _tensor(config.input.add(), "image", DT.TYPE_UINT8, [3, 8, 8])
    config.input[0].reshape.shape.extend([192])
    _tensor(config.output.add(), "pixels", DT.TYPE_FP32, [2, 4, -1])
    config.output[0].reshape.shape.extend([8, -1])
    config.instance_group.add(kind=Kind.KIND_CPU, count=2)
    config.version_policy.specific.versions.extend([1, 2])
    return config


def _sequence(name: str) -> mc.ModelConfig:
    config = _base(name, "tensorrt_plan", 4)
    _tensor(config.input.add(), "x", DT.TYPE_INT32, [1])
    _tensor(config.output.add(), "y", DT.TYPE_INT32, [1])
    batcher = config.sequence_batching
    batcher.max_sequence_idle_microseconds = 5000000
    for tensor, kind, values in (
        ("START", Control.CONTROL_SEQUENCE_START, "int32"),
        ("END", Control.CONTROL_SEQUENCE_END, "fp32"),
        ("READY", Control.CONTROL_SEQUENCE_READY, "bool"),
        ("CORRID", Control.CONTROL_SEQUENCE_CORRID, None),
    ):
        control = batcher.control_input.add(name=tensor).control.add(kind=kind)
        if values == "int32":
            control.int32_false_true.extend([0, 1])
        elif values == "fp32":
            control.fp32_false_true.extend([0.0, 1.0])
        elif values == "bool":
            control.bool_false_true.extend([False, True])
        else:
            control.data_type = DT.TYPE_UINT64
    batcher.oldest.max_candidate_sequences = 4
    batcher.oldest.preferred_batch_size.extend([2])
    config.instance_group.add(kind=Kind.KIND_CPU, count=1)
    return config


def _batch_io(name: str) -> mc.ModelConfig:
    config = _base(name, "tensorrt_plan", 8)
    _tensor(config.input.add(), "tokens", DT.TYPE_INT32, [-1])
    _tensor(config.output.add(), "logits", DT.TYPE_FP32, [-1])
    config.batch_input.add(
        kind=mc.BatchInput.BATCH_ACCUMULATED_ELEMENT_COUNT,
        target_name=["offsets"],
        data_type=DT.TYPE_INT32,
        source_input=["tokens"],
    )
    config.batch_output.add(
        kind=mc.BatchOutput.BATCH_SCATTER_WITH_INPUT_SHAPE, target_name=["logits"], source_input=["tokens"]
    )
    config.dynamic_batching.SetInParent()
    config.instance_group.add(kind=Kind.KIND_MODEL, count=1)
    return config


def _pipeline(name: str) -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, platform="ensemble", max_batch_size=8)
    _tensor(config.input.add(), "RAW", DT.TYPE_UINT8, [16])
    _tensor(config.output.add(), "SCORES", DT.TYPE_FP32, [4])
    first = config.ensemble_scheduling.step.add(model_name="m_pre", model_version=-1)
    first.input_map["raw"] = "RAW"
    first.output_map["feat"] = "FEATURES"
    second = config.ensemble_scheduling.step.add(model_name="m_cls", model_version=-1)
    second.input_map["feat"] = "FEATURES"
    second.output_map["score"] = "SCORES"
    return config


def _fan_out(name: str) -> mc.ModelConfig:
    """Two steps reading one tensor (a mutation may make one of them the decoupled member)."""
    config = mc.ModelConfig(name=name, platform="ensemble", max_batch_size=4)
    _tensor(config.input.add(), "FEATURES", DT.TYPE_FP32, [16])
    _tensor(config.output.add(), "A", DT.TYPE_FP32, [4])
    _tensor(config.output.add(), "B", DT.TYPE_FP32, [4])
    for member, out in (("m_cls", "A"), ("m_cls", "B")):
        step = config.ensemble_scheduling.step.add(model_name=member, model_version=-1)
        step.input_map["feat"] = "FEATURES"
        step.output_map["score"] = out
    return config


SEEDS: dict[str, Callable[[str], mc.ModelConfig]] = {
    "classifier": _classifier,
    "fixed": _fixed,
    "sequence": _sequence,
    "batch-io": _batch_io,
    "pipeline": _pipeline,
    "fan-out": _fan_out,
}


def _member(name: str, max_batch: int, inputs: list[tuple[str, int, list[int]]], decoupled: bool = False):
    config = _base(name, "tensorrt_plan", max_batch)
    for tensor, data_type, dims in inputs:
        _tensor(config.input.add(), tensor, data_type, dims)
    _tensor(config.output.add(), "feat" if name == "m_pre" else "score", DT.TYPE_FP32, [16] if name == "m_pre" else [4])
    config.instance_group.add(kind=Kind.KIND_CPU, count=1)
    config.model_transaction_policy.decoupled = decoupled
    return config


MEMBERS: dict[str, mc.ModelConfig] = {
    "m_pre": _member("m_pre", 8, [("raw", DT.TYPE_UINT8, [16])]),
    "m_cls": _member("m_cls", 8, [("feat", DT.TYPE_FP32, [16])]),
    "m_dec": _member("m_dec", 4, [("feat", DT.TYPE_FP32, [16])], decoupled=True),
}


def _files(config: mc.ModelConfig) -> dict[str, bytes]:
    """Version folders 1 and 2 with the model file the platform loads (the stand-in reads nothing)."""
    model_file = {"tensorrt_plan": "model.plan", "pytorch_libtorch": "model.pt"}.get(config.platform)
    files = {}
    for version in VERSIONS:
        files[f"{version}/{model_file}" if model_file else f"{version}/.keep"] = b""
    return files


# -- mutations: each returns a label, or None when it does not apply to this config ------------


def _io(rng: random.Random, config: mc.ModelConfig) -> mc.ModelInput | mc.ModelOutput | None:
    tensors = [*config.input, *config.output]
    return rng.choice(tensors) if tensors else None


def dims_value(rng: random.Random, config: mc.ModelConfig) -> str | None:
    tensor = _io(rng, config)
    if tensor is None:
        return None
    value = rng.choice([0, -2, -1, 1, 3, 16, 192])
    if not tensor.dims:
        tensor.dims.append(value)
    else:
        tensor.dims[rng.randrange(len(tensor.dims))] = value
    return f"dims of {tensor.name} -> {list(tensor.dims)}"


def dims_rank(rng: random.Random, config: mc.ModelConfig) -> str | None:
    tensor = _io(rng, config)
    if tensor is None:
        return None
    if tensor.dims and rng.random() < 0.5:
        del tensor.dims[rng.randrange(len(tensor.dims))]
    else:
        tensor.dims.insert(rng.randrange(len(tensor.dims) + 1), rng.choice([-1, 1, 2, 4]))
    return f"rank of {tensor.name} -> {list(tensor.dims)}"


def reshape(rng: random.Random, config: mc.ModelConfig) -> str | None:
    tensor = _io(rng, config)
    if tensor is None:
        return None
    choice = rng.random()
    if choice < 0.2:
        tensor.reshape.Clear()
        tensor.reshape.SetInParent()
    elif choice < 0.3:
        tensor.ClearField("reshape")
    else:
        count = 1
        for dim in tensor.dims:
            count *= abs(dim) or 1
        pool = [1, 2, 4, 8, -1, 0, count, count * 2, -2]
        tensor.reshape.shape[:] = [rng.choice(pool) for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.4:
            tensor.reshape.shape[:] = [d for d in tensor.dims] if rng.random() < 0.5 else [count]
    return f"reshape of {tensor.name} -> {list(tensor.reshape.shape) if tensor.HasField('reshape') else 'none'}"


def data_type(rng: random.Random, config: mc.ModelConfig) -> str | None:
    tensor = _io(rng, config)
    if tensor is None:
        return None
    tensor.data_type = rng.choice([DT.TYPE_INVALID, *TYPES])
    return f"data_type of {tensor.name} -> {DT.Name(tensor.data_type)}"


def tensor_name(rng: random.Random, config: mc.ModelConfig) -> str | None:
    tensor = _io(rng, config)
    if tensor is None:
        return None
    others = [t.name for t in [*config.input, *config.output] if t is not tensor]
    tensor.name = rng.choice(["", *others, "renamed"])
    return f"a tensor renamed '{tensor.name}'"


def tensor_flags(rng: random.Random, config: mc.ModelConfig) -> str | None:
    tensor = _io(rng, config)
    if tensor is None:
        return None
    flag = rng.choice(["is_shape_tensor", "is_non_linear_format_io", "format", "optional"])
    if flag == "format":
        if not isinstance(tensor, mc.ModelInput):
            return None
        tensor.format = rng.choice([mc.ModelInput.FORMAT_NHWC, mc.ModelInput.FORMAT_NCHW])
    elif flag == "optional":
        if not isinstance(tensor, mc.ModelInput):
            return None
        tensor.optional = True
    else:
        setattr(tensor, flag, True)
    return f"{flag} on {tensor.name}"


def max_batch_size(rng: random.Random, config: mc.ModelConfig) -> str | None:
    config.max_batch_size = rng.choice([-1, 0, 1, 2, 4, 16])
    return f"max_batch_size -> {config.max_batch_size}"


def preferred_sizes(rng: random.Random, config: mc.ModelConfig) -> str | None:
    sizes = [rng.choice([-1, 0, 1, 2, 4, 8, 9, 32]) for _ in range(rng.randint(0, 3))]
    if config.HasField("sequence_batching") and rng.random() < 0.7:
        config.sequence_batching.oldest.preferred_batch_size[:] = sizes
        return f"sequence oldest preferred_batch_size -> {sizes}"
    config.dynamic_batching.preferred_batch_size[:] = sizes
    return f"dynamic preferred_batch_size -> {sizes}"


def priorities(rng: random.Random, config: mc.ModelConfig) -> str | None:
    batching = config.dynamic_batching
    batching.priority_levels = rng.choice([0, 1, 2, 3])
    batching.default_priority_level = rng.choice([0, 1, 2, 3, 4])
    for _ in range(rng.randint(0, 2)):
        policy = batching.priority_queue_policy[rng.choice([0, 1, 2, 4])]
        policy.timeout_action = rng.choice([mc.ModelQueuePolicy.REJECT, mc.ModelQueuePolicy.DELAY])
        policy.default_timeout_microseconds = rng.choice([0, 1000])
    return (
        f"priority_levels {batching.priority_levels}, default {batching.default_priority_level}, "
        f"policies {sorted(batching.priority_queue_policy)}"
    )


def preserve_ordering(rng: random.Random, config: mc.ModelConfig) -> str | None:
    batching = config.dynamic_batching
    batching.preserve_ordering = True
    if rng.random() < 0.6:
        batching.default_queue_policy.timeout_action = rng.choice(
            [mc.ModelQueuePolicy.REJECT, mc.ModelQueuePolicy.DELAY]
        )
        batching.default_queue_policy.default_timeout_microseconds = rng.choice([0, 500])
    if rng.random() < 0.4:
        batching.priority_levels = rng.choice([1, 2])
        batching.default_priority_level = 1
    return "preserve_ordering with queue policies"


def sequence_controls(rng: random.Random, config: mc.ModelConfig) -> str | None:
    batcher = config.sequence_batching
    if not batcher.control_input:
        batcher.control_input.add(name="START").control.add(kind=Control.CONTROL_SEQUENCE_START)
    tensor = rng.choice(batcher.control_input)
    action = rng.choice(["duplicate-kind", "shared-tensor", "values", "corrid-type", "no-name", "drop"])
    if action == "duplicate-kind":
        extra = batcher.control_input.add(name="EXTRA")
        extra.control.add().CopyFrom(rng.choice(tensor.control))
    elif action == "shared-tensor":
        batcher.control_input.add(name=tensor.name).control.add(
            kind=rng.choice(list(Control.Kind.values())), int32_false_true=[0, 1]
        )
    elif action == "values":
        control = rng.choice(tensor.control)
        for value_field in ("int32_false_true", "fp32_false_true", "bool_false_true"):
            if rng.random() < 0.4:
                getattr(control, value_field)[:] = [rng.choice([0, 1]) for _ in range(rng.choice([0, 1, 2, 3]))]
    elif action == "corrid-type":
        control = rng.choice(tensor.control)
        control.kind = Control.CONTROL_SEQUENCE_CORRID
        control.data_type = rng.choice(TYPES)
    elif action == "no-name":
        tensor.name = ""
    else:
        batcher.control_input.remove(tensor)
    return f"sequence controls: {action} on {tensor.name or '(unnamed)'}"


def sequence_strategy(rng: random.Random, config: mc.ModelConfig) -> str | None:
    batcher = config.sequence_batching
    if rng.random() < 0.5:
        batcher.direct.minimum_slot_utilization = rng.choice([-0.5, 0.0, 0.5, 1.0, 1.5])
        return f"direct minimum_slot_utilization {batcher.direct.minimum_slot_utilization}"
    batcher.oldest.max_candidate_sequences = rng.choice([1, 4])
    batcher.oldest.preferred_batch_size[:] = [rng.choice([0, 2, 4, 5])]
    return f"oldest preferred {list(batcher.oldest.preferred_batch_size)}"


def response_cache(rng: random.Random, config: mc.ModelConfig) -> str | None:
    config.response_cache.enable = True
    if rng.random() < 0.5:
        config.model_transaction_policy.decoupled = True
    return f"response_cache on (decoupled: {config.model_transaction_policy.decoupled})"


def batch_strategy(rng: random.Random, config: mc.ModelConfig) -> str | None:
    config.parameters["TRITON_BATCH_STRATEGY_PATH"].string_value = "/nonexistent/batchstrategy.so"
    return "TRITON_BATCH_STRATEGY_PATH"


def batch_io(rng: random.Random, config: mc.ModelConfig) -> str | None:
    inputs = [t.name for t in config.input] + ["nope"]
    outputs = [t.name for t in config.output] + ["nope"]
    if rng.random() < 0.6:
        batch = config.batch_input.add() if not config.batch_input or rng.random() < 0.3 else config.batch_input[0]
        batch.kind = rng.choice(list(mc.BatchInput.Kind.values()))
        batch.data_type = rng.choice([DT.TYPE_INT32, DT.TYPE_FP32, DT.TYPE_INT64])
        batch.source_input[:] = [rng.choice(inputs) for _ in range(rng.choice([0, 1, 1, 2]))]
        batch.target_name[:] = [rng.choice(["offsets", "lengths"])]
        return f"batch_input {mc.BatchInput.Kind.Name(batch.kind)} sources {list(batch.source_input)}"
    batch = config.batch_output.add() if not config.batch_output or rng.random() < 0.3 else config.batch_output[0]
    batch.kind = mc.BatchOutput.BATCH_SCATTER_WITH_INPUT_SHAPE
    batch.source_input[:] = [rng.choice(inputs) for _ in range(rng.choice([0, 1, 1, 2]))]
    batch.target_name[:] = [rng.choice(outputs) for _ in range(rng.choice([1, 1, 2]))]
    return f"batch_output sources {list(batch.source_input)} targets {list(batch.target_name)}"


def instance_groups(rng: random.Random, config: mc.ModelConfig) -> str | None:
    group = config.instance_group.add() if not config.instance_group or rng.random() < 0.3 else config.instance_group[0]
    group.kind = rng.choice([Kind.KIND_CPU, Kind.KIND_MODEL, Kind.KIND_AUTO, Kind.KIND_CPU, Kind.KIND_GPU])
    group.count = rng.choice([-1, 0, 1, 2])
    if rng.random() < 0.4:
        group.gpus[:] = [rng.choice([0, 1])]
    if rng.random() < 0.25:
        group.profile[:] = [rng.choice(["0", "1", "-1", "abc", "", " 2x"])]
    return f"instance_group {Kind.Name(group.kind)} count {group.count} gpus {list(group.gpus)} {list(group.profile)}"


def version_policy(rng: random.Random, config: mc.ModelConfig) -> str | None:
    choice = rng.choice(["latest", "specific", "all"])
    if choice == "latest":
        config.version_policy.latest.num_versions = rng.choice([0, 1, 2, 3])
        return f"version_policy latest {config.version_policy.latest.num_versions}"
    if choice == "specific":
        config.version_policy.specific.versions[:] = [rng.choice([1, 2, 3, 7]) for _ in range(rng.choice([0, 1, 2]))]
        return f"version_policy specific {list(config.version_policy.specific.versions)}"
    config.version_policy.all.SetInParent()
    return "version_policy all"


def warmup(rng: random.Random, config: mc.ModelConfig) -> str | None:
    if not config.model_warmup or rng.random() < 0.3:
        sample = config.model_warmup.add(name=f"w{len(config.model_warmup)}", batch_size=1)
        for tensor in config.input:
            if rng.random() < 0.9:
                entry = sample.inputs[tensor.name]
                entry.data_type = tensor.data_type
                entry.dims.extend([3 if d == -1 else d for d in tensor.dims])
                entry.zero_data = True
    sample = rng.choice(config.model_warmup)
    action = rng.choice(["batch", "dims", "type", "source", "unknown", "drop"])
    entries = list(sample.inputs)
    if action == "batch":
        sample.batch_size = rng.choice([0, 1, 2, 4, 8, 9])
    elif action == "unknown":
        sample.inputs["unknown"].CopyFrom(mc.ModelWarmup.Input(data_type=DT.TYPE_FP32, dims=[1], zero_data=True))
    elif not entries:
        return None
    else:
        entry = sample.inputs[rng.choice(entries)]
        if action == "dims":
            entry.dims[:] = [rng.choice([-1, 1, 3, 16]) for _ in range(rng.choice([0, 1, 1, 2]))]
        elif action == "type":
            entry.data_type = rng.choice(TYPES)
        elif action == "source":
            choice = rng.choice(["none", "random", "file"])
            if choice == "none":
                entry.ClearField("input_data_type")
            elif choice == "random":
                entry.random_data = True
            else:
                entry.input_data_file = rng.choice(["raw.bin", "missing.bin"])
        else:
            del sample.inputs[rng.choice(entries)]
    return f"warmup {sample.name}: {action}"


def runtime(rng: random.Random, config: mc.ModelConfig) -> str | None:
    backend = {"tensorrt_plan": "tensorrt", "pytorch_libtorch": "pytorch"}.get(config.platform, "tensorrt")
    config.runtime = rng.choice([f"libtriton_{backend}.so", "libtriton_missing.so", "model.py", "../libtriton_x.so"])
    return f"runtime {config.runtime}"


def labels(rng: random.Random, config: mc.ModelConfig) -> str | None:
    if not config.output:
        return None
    config.output[0].label_filename = rng.choice(["labels.txt", "missing.txt"])
    return f"label_filename {config.output[0].label_filename}"


def ensemble_steps(rng: random.Random, config: mc.ModelConfig) -> str | None:
    if not config.ensemble_scheduling.step:
        return None
    step = rng.choice(config.ensemble_scheduling.step)
    action = rng.choice(["member", "self", "version", "input-key", "output-key", "tensor", "drop-map", "no-steps"])
    if action == "member":
        step.model_name = rng.choice(["m_pre", "m_cls", "m_dec", "missing", ""])
    elif action == "self":
        step.model_name = config.name
    elif action == "version":
        step.model_version = rng.choice([1, 2, 5])
    elif action == "input-key" and step.input_map:
        key = rng.choice(list(step.input_map))
        step.input_map[rng.choice(["feat", "raw", "other"])] = step.input_map.pop(key)
    elif action == "output-key" and step.output_map:
        key = rng.choice(list(step.output_map))
        step.output_map[rng.choice(["feat", "score", "other"])] = step.output_map.pop(key)
    elif action == "tensor":
        names = ["RAW", "FEATURES", "SCORES", "A", "B", "LOOSE"]
        target = step.input_map if rng.random() < 0.5 else step.output_map
        if not target:
            return None
        target[rng.choice(list(target))] = rng.choice(names)
    elif action == "drop-map":
        step.ClearField(rng.choice(["input_map", "output_map"]))
    elif action == "no-steps":
        config.ensemble_scheduling.ClearField("step")
    else:
        return None
    return f"ensemble step {step.model_name or '(none)'}: {action}"


def ensemble_fields(rng: random.Random, config: mc.ModelConfig) -> str | None:
    actions = ["instance-group", "optimization", "warmup", "scheduling-elsewhere", "no-scheduling", "backend"]
    action = rng.choice(actions)
    if action == "instance-group":
        config.instance_group.add(kind=Kind.KIND_CPU, count=1)
    elif action == "optimization":
        config.optimization.input_pinned_memory.enable = True
    elif action == "warmup":
        config.model_warmup.add(name="w", batch_size=1)
    elif action == "scheduling-elsewhere":
        if config.platform == "ensemble":
            return None
        step = config.ensemble_scheduling.step.add(model_name="m_cls")
        step.input_map["feat"] = "embedding"
        step.output_map["score"] = "scores"
    elif action == "no-scheduling":
        config.ClearField("ensemble_scheduling")
    else:
        config.backend = "tensorrt"
    return f"ensemble field: {action}"


MUTATIONS: dict[str, tuple[float, Mutation]] = {
    "dims-value": (3, dims_value),
    "dims-rank": (2, dims_rank),
    "reshape": (3, reshape),
    "data-type": (2, data_type),
    "tensor-name": (1, tensor_name),
    "tensor-flags": (1, tensor_flags),
    "max-batch-size": (2, max_batch_size),
    "preferred-sizes": (2, preferred_sizes),
    "priorities": (2, priorities),
    "preserve-ordering": (1, preserve_ordering),
    "sequence-controls": (3, sequence_controls),
    "sequence-strategy": (1, sequence_strategy),
    "response-cache": (1, response_cache),
    "batch-strategy": (0.3, batch_strategy),
    "batch-io": (2, batch_io),
    "instance-groups": (2, instance_groups),
    "version-policy": (2, version_policy),
    "warmup": (3, warmup),
    "runtime": (1, runtime),
    "labels": (0.5, labels),
    "ensemble-steps": (4, ensemble_steps),
    "ensemble-fields": (2, ensemble_fields),
}


def exclusion(config: mc.ModelConfig) -> str | None:
    """Why a case cannot be judged by both engines on this machine, or None."""
    if any(group.kind == Kind.KIND_GPU for group in config.instance_group) and config.platform != "ensemble":
        return "KIND_GPU needs a GPU: Triton 2.51 on this CPU-only machine refuses it before any other check"
    if config.runtime == "model.py" and config.platform == "pytorch_libtorch":
        return (
            "runtime model.py on pytorch is the real pytorch backend's Python runtime (backends/pytorch/model.py), "
            "which the stand-in backend does not have"
        )
    listed = list(config.version_policy.specific.versions)
    if any(listed.count(version) > 1 and version not in VERSIONS for version in listed):
        return (
            "a version listed twice without its folder: Triton 2.51 counts it as present (VersionsToLoad inserts "
            "it into its set of existing versions on first sight) and loads it; only a real backend then fails "
            "for the missing model file, the stand-in reads none"
        )
    return None


def generate(seed: int, count: int, prefix: str) -> list[Case]:
    rng = random.Random(seed)
    names, weights = list(MUTATIONS), [weight for weight, _ in MUTATIONS.values()]
    cases = []
    for n in range(count):
        seed_name = rng.choice(list(SEEDS))
        name = f"{prefix}{n:04d}"
        config = SEEDS[seed_name](name)
        applied: list[str] = []
        for _ in range(1 if rng.random() < 0.7 else 2):
            mutation = MUTATIONS[rng.choices(names, weights)[0]][1]
            label = mutation(rng, config)
            if label:
                applied.append(label)
        files = _files(config)
        if any(output.label_filename == "labels.txt" for output in config.output):
            files["labels.txt"] = b"a\nb\nc\nd\n"
        if any(e.input_data_file == "raw.bin" for w in config.model_warmup for e in w.inputs.values()):
            files["warmup/raw.bin"] = bytes(rng.choice([16, 64, 4096]))
        cases.append(Case(name, seed_name, applied, config, files, exclusion(config)))
    return cases


def write_members(repository: Path) -> None:
    for name, config in MEMBERS.items():
        Case(name, "member", [], config, _files(config)).write(repository)
