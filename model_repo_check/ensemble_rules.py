"""Ensembles, as Triton core checks them when it loads one.

Follows triton-inference-server/core r24.10 (Triton 2.51): src/model_config_utils.cc
ValidateEnsembleSchedulingConfig and BuildEnsembleGraph (the ensemble on its own: no instance
groups, optimization or warmup, every step complete, every tensor used, every output written),
src/model_repository_manager/model_repository_manager.cc CircularDependencyCheck and CheckNode
(members that exist and load), and src/ensemble_scheduler/ensemble_utils.cc
ValidateEnsembleConfig (max_batch_size against each member, the member's inputs and outputs,
data type and shape consistent between steps, no step fed from two decoupled branches).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tritonclient.grpc import model_config_pb2

from model_repo_check.deployment import versions_to_load
from model_repo_check.findings import Report
from model_repo_check.layout import ModelDir

ENSEMBLE = "ensemble"
DataType = model_config_pb2.DataType


def check_ensemble_alone(model: ModelDir, report: Report) -> None:
    """ValidateModelConfig's ensemble part and ValidateEnsembleSchedulingConfig."""
    config, where, name = model.config, model.where, model.config.name
    if config.platform == ENSEMBLE and config.backend:
        report.error(
            "ensemble",
            f"Ensemble model '{name}' must have platform type 'ensemble' and empty backend type",
            where.find("backend"),
        )
    if not config.HasField("ensemble_scheduling"):
        if config.platform == ENSEMBLE:
            report.error(
                "ensemble",
                f"ensemble scheduling must be set for ensemble {name} whose platform is ensemble",
                where.find("platform"),
            )
        return
    at = where.find("ensemble_scheduling")
    if config.platform != ENSEMBLE:
        report.error(
            "ensemble",
            f"ensemble scheduling cannot be set for model '{name}' whose platform is not ensemble",
            at,
        )
        return
    for field_name, present, words in (
        ("instance_group", bool(config.instance_group), "instance group should not be specified"),
        ("optimization", config.HasField("optimization"), "optimization should not be specified"),
        ("model_warmup", bool(config.model_warmup), "model_warmup can not be specified"),
    ):
        if present:
            report.error("ensemble", f"{words} for ensemble '{name}'", where.find(field_name))
            return
    steps = config.ensemble_scheduling.step
    if not steps:
        report.error("ensemble", f"must specify 'step' for ensemble '{name}'", at)
        return
    problem = _data_flow_problem(config)
    if problem:
        report.error("ensemble", problem, at)


@dataclass
class _Tensor:
    is_output: bool
    ready: bool = False
    prev: list[str] = field(default_factory=list)
    next: list[str] = field(default_factory=list)


def _data_flow_problem(config: model_config_pb2.ModelConfig) -> str | None:
    """BuildEnsembleGraph and the data-flow walk of ValidateEnsembleSchedulingConfig."""
    name = config.name
    tensors: dict[str, _Tensor] = {}
    for s, step in enumerate(config.ensemble_scheduling.step):
        for field_name in ("model_name", "input_map", "output_map"):
            if not getattr(step, field_name):
                return f"must specify '{field_name}' in step {s} of ensemble '{name}'"
        produced = []
        for tensor in step.output_map.values():
            node = tensors.setdefault(tensor, _Tensor(is_output=False))
            if node.is_output:
                return (
                    f"ensemble tensor '{tensor}' can appear in an output map only once for ensemble '{name}' step {s}"
                )
            node.is_output = True
            produced.append(tensor)
        for tensor in step.input_map.values():
            tensors.setdefault(tensor, _Tensor(is_output=False))
            for out in produced:
                tensors[out].prev.append(tensor)
                tensors[tensor].next.append(out)
    queue = []
    for tensor in config.input:
        if tensor.name not in tensors:
            return f"ensemble input '{tensor.name}' for ensemble {name}' is not used"
        tensors[tensor.name].ready = True
        queue.append(tensor.name)
    while queue:
        for following in tensors[queue.pop(0)].next:
            node = tensors[following]
            if not node.ready and all(tensors[p].ready for p in node.prev):
                node.ready = True
                queue.append(following)
    outputs = set()
    for tensor in config.output:
        if tensor.name not in tensors:
            return f"ensemble output '{tensor.name}' for ensemble {name}' is not used"
        if not tensors[tensor.name].ready:
            return f"output '{tensor.name}' for ensemble '{name}' is not written"
        outputs.add(tensor.name)
    for tensor, node in tensors.items():
        if tensor not in outputs and (not node.ready or not node.next):
            return f"ensemble tensor '{tensor}' is unused in ensemble '{name}'"
    return None


def check_ensemble_members(model: ModelDir, models: Mapping[str, ModelDir], failed: set[str], report: Report) -> None:
    """What Triton checks once the members are loaded; `failed`: models the rules engine refuses."""
    config = model.config
    if config.platform != ENSEMBLE or not config.ensemble_scheduling.step:
        return
    at = model.where.find("ensemble_scheduling")
    name = config.name
    if (cycle := _cycle(name, models)) is not None:
        report.error("ensemble", f"circular dependency between ensembles: {' -> '.join(cycle)}", at)
        return
    for step in config.ensemble_scheduling.step:
        member = models.get(step.model_name)
        if member is None:
            report.error(
                "ensemble",
                f"ensemble '{name}' depends on '{step.model_name}', which is not a model of this repository",
                at,
            )
            return
        if step.model_name in failed:
            report.error(
                "ensemble",
                f"ensemble '{name}' depends on '{step.model_name}' which is not valid (see its errors)",
                at,
            )
            return
        if step.model_version != -1 and step.model_version not in versions_to_load(member):
            report.error(
                "ensemble",
                f"ensemble '{name}' depends on '{step.model_name}' whose required version {step.model_version} "
                "is not loaded.",
                at,
            )
            return
    problem = _member_problem(config, models)
    if problem:
        report.error("ensemble", problem, at)


def _cycle(start: str, models: Mapping[str, ModelDir]) -> list[str] | None:
    def walk(name: str, path: list[str]) -> list[str] | None:
        model = models.get(name)
        if model is None or model.config.platform != ENSEMBLE:
            return None
        for step in model.config.ensemble_scheduling.step:
            if step.model_name == start:
                return [*path, start]
            if step.model_name not in path and (found := walk(step.model_name, [*path, step.model_name])):
                return found
        return None

    return walk(start, [start])


@dataclass
class _Node:
    model: str
    data_type: int
    dims: list[int]
    full_dims: list[int]
    decoupled: bool = False
    label: int = 0
    visited: bool = False
    prev: list[str] = field(default_factory=list)
    next: list[str] = field(default_factory=list)
    sibling: list[int] | None = None  # [visited, label] shared by the outputs of one step


def _node(model: str, batching: bool, data_type: int, dims: Sequence[int]) -> _Node:
    return _Node(model, data_type, list(dims), ([-1] if batching else []) + list(dims))


def _same_dims(lhs: Sequence[int], rhs: Sequence[int]) -> bool:
    """triton::common::CompareDimsWithWildcard."""
    return len(lhs) == len(rhs) and all(a == b or -1 in (a, b) for a, b in zip(lhs, rhs, strict=True))


def _consistent(lhs: _Node, rhs: _Node, prefix: str) -> str | None:
    if lhs.data_type != rhs.data_type:
        return (
            f"{prefix}inconsistent data type: {DataType.Name(lhs.data_type)} is inferred from model {lhs.model} "
            f"while {DataType.Name(rhs.data_type)} is inferred from model {rhs.model}"
        )
    if not _same_dims(lhs.dims, rhs.dims) and not _same_dims(lhs.full_dims, rhs.full_dims):
        return (
            f"{prefix}inconsistent shape: {lhs.full_dims} is inferred from model {lhs.model} while "
            f"{rhs.full_dims} is inferred from model {rhs.model}"
        )
    return None


def _member_problem(config: model_config_pb2.ModelConfig, models: Mapping[str, ModelDir]) -> str | None:
    """ValidateEnsembleConfig and ValidateTensorMapping."""
    name, batching = config.name, config.max_batch_size > 0
    tensors: dict[str, _Node] = {}
    for tensor in config.input:
        dims = tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims
        tensors[tensor.name] = _node(name, batching, tensor.data_type, dims)
    # The ensemble's outputs feed one sink node, so they too must come from one decoupled branch.
    sink = "\0sink"
    tensors[sink] = _Node(name, DataType.TYPE_INVALID, [], [])
    for tensor in config.output:
        dims = tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims
        tensors.setdefault(tensor.name, _node(name, batching, tensor.data_type, dims)).next.append(sink)
        tensors[sink].prev.append(tensor.name)
    for step in config.ensemble_scheduling.step:
        member = models[step.model_name].config
        if member.max_batch_size != 0 and member.max_batch_size < config.max_batch_size:
            return (
                f"ensemble {name} allows maximum batch size {config.max_batch_size}, but it contains model "
                f"{step.model_name} which only allows maximum batch size to be {member.max_batch_size}"
            )
        if problem := _mapping_problem(name, step, member, tensors):
            return problem
    return _decoupled_problem(config, tensors)


def _mapping_problem(
    name: str,
    step: model_config_pb2.ModelEnsembling.Step,
    member: model_config_pb2.ModelConfig,
    tensors: dict[str, _Node],
) -> str | None:
    batching, member_name = member.max_batch_size > 0, step.model_name
    inputs = {tensor.name for tensor in member.input}
    for key, tensor in step.input_map.items():
        if key not in inputs:
            return (
                f"in ensemble {name}, ensemble tensor {tensor} is mapping to non-existing input {key} "
                f"in model {member_name}"
            )
    for model_input in member.input:
        mapped = [tensor for key, tensor in step.input_map.items() if key == model_input.name]
        if not mapped and not model_input.optional:
            return (
                f"in ensemble {name}, input {model_input.name} in model {member_name} "
                "is not mapped to any ensemble tensors"
            )
        for tensor in mapped:
            node = _node(member_name, batching, model_input.data_type, model_input.dims)
            if tensor in tensors:
                if problem := _consistent(tensors[tensor], node, f"in ensemble {name}, ensemble tensor {tensor}: "):
                    return problem
            else:
                tensors[tensor] = node
    outputs = {tensor.name for tensor in member.output}
    for key, tensor in step.output_map.items():
        if key not in outputs:
            return (
                f"in ensemble {name}, ensemble tensor {tensor} is mapped from non-existing output {key} "
                f"in model {member_name}"
            )
    sibling = [0, 0]
    for key, tensor in step.output_map.items():
        model_output = next(output for output in member.output if output.name == key)
        node = _node(member_name, batching, model_output.data_type, model_output.dims)
        if tensor in tensors:
            if problem := _consistent(tensors[tensor], node, f"in ensemble {name}, ensemble tensor {tensor}: "):
                return problem
        else:
            tensors[tensor] = node
        tensors[tensor].sibling = sibling
    decoupled = member.model_transaction_policy.decoupled
    for tensor in step.output_map.values():
        tensors[tensor].decoupled = decoupled
        for source in step.input_map.values():
            tensors[tensor].prev.append(source)
            tensors[source].next.append(tensor)
    return None


def _decoupled_problem(config: model_config_pb2.ModelConfig, tensors: dict[str, _Node]) -> str | None:
    """The walk that labels each tensor with the decoupled step it comes from."""
    label = 0
    queue = []
    for tensor in config.input:
        tensors[tensor.name].visited = True
        queue.append(tensor.name)
    while queue:
        for following in tensors[queue.pop(0)].next:
            node = tensors[following]
            if node.visited or not all(tensors[p].visited for p in node.prev):
                continue
            first = tensors[node.prev[0]].label
            if any(tensors[p].label != first for p in node.prev):
                return (
                    f"in ensemble {config.name}, step of model '{node.model}' receives inputs originated from "
                    "different decoupled models"
                )
            if node.sibling is not None:
                if node.sibling[0]:
                    node.label = node.sibling[1]
                else:
                    label += node.decoupled
                    node.label = label if node.decoupled else first
                    node.sibling[:] = [1, node.label]
            else:
                label += node.decoupled
                node.label = label if node.decoupled else first
            node.visited = True
            queue.append(following)
    return None
