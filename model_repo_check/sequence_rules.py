"""Sequence batching, as Triton core checks it at load time.

Follows triton-inference-server/core r24.10 (Triton 2.51), src/model_config_utils.cc:
ValidateModelConfig's sequence_batching block, GetBooleanSequenceControlProperties (START, END,
READY) and GetTypedSequenceControlProperties (CORRID).
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2

from model_repo_check.findings import Report
from model_repo_check.layout import ModelDir

Control = model_config_pb2.ModelSequenceBatching.Control
DataType = model_config_pb2.DataType
BOOLEAN_KINDS = (Control.CONTROL_SEQUENCE_START, Control.CONTROL_SEQUENCE_END, Control.CONTROL_SEQUENCE_READY)
CORRID_TYPES = frozenset(
    {DataType.TYPE_UINT64, DataType.TYPE_INT64, DataType.TYPE_UINT32, DataType.TYPE_INT32, DataType.TYPE_STRING}
)
VALUE_FIELDS = ("int32_false_true", "fp32_false_true", "bool_false_true")


def check_sequence_batching(model: ModelDir, report: Report) -> None:
    config, where = model.config, model.where
    if not config.HasField("sequence_batching"):
        return
    batcher = config.sequence_batching
    name = config.name
    if config.response_cache.enable:
        report.error(
            "response-cache",
            f"Response Cache does not currently support model {name} with sequence batching scheduler. "
            "Please disable the response cache.",
            where.find("response_cache"),
        )
    for kind in (*BOOLEAN_KINDS, Control.CONTROL_SEQUENCE_CORRID):
        _check_control(model, kind, report)
    if batcher.HasField("oldest"):
        for i, size in enumerate(batcher.oldest.preferred_batch_size):
            at = where.find("sequence_batching", "oldest", "preferred_batch_size", i)
            if size <= 0:
                report.error(
                    "preferred-batch-size", f"sequence batching preferred batch size must be positive for {name}", at
                )
            elif size > config.max_batch_size:
                report.error(
                    "preferred-batch-size",
                    f"sequence batching preferred batch size must be <= max batch size for {name} "
                    f"({size} > {config.max_batch_size})",
                    at,
                )
    if batcher.HasField("direct") and not 0.0 <= batcher.direct.minimum_slot_utilization <= 1.0:
        report.error(
            "sequence-direct",
            f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for {name}",
            where.find("sequence_batching", "direct", "minimum_slot_utilization"),
        )


def _check_control(model: ModelDir, kind: int, report: Report) -> None:
    """One pass of Get{Boolean,Typed}SequenceControlProperties for `kind`; Triton stops at the first error."""
    batcher, name = model.config.sequence_batching, model.config.name
    kind_name = Control.Kind.Name(kind)
    seen_tensors: set[str] = set()
    seen_control = False
    for t, tensor in enumerate(batcher.control_input):
        at = model.where.find("sequence_batching", "control_input", t)
        if not tensor.name:
            report.error("sequence-control", f"sequence batching control tensor must have a name for {name}", at)
            return
        if tensor.name in seen_tensors:
            report.error(
                "sequence-control",
                f"sequence batching control tensor '{tensor.name}' is specified for multiple control kinds for {name}",
                at,
            )
            return
        seen_tensors.add(tensor.name)
        for control in tensor.control:
            if control.kind != kind:
                continue
            if seen_control:
                report.error(
                    "sequence-control", f"sequence batching specifies multiple {kind_name} tensors for {name}", at
                )
                return
            seen_control = True
            given = [field for field in VALUE_FIELDS if len(getattr(control, field))]
            problem = (
                _typed_problem(given) if kind == Control.CONTROL_SEQUENCE_CORRID else _boolean_problem(control, given)
            )
            if problem is None and kind == Control.CONTROL_SEQUENCE_CORRID and control.data_type not in CORRID_TYPES:
                report.error(
                    "sequence-control",
                    f"unexpected data type for control {kind_name} for {name}. Allowed data types are TYPE_UINT64, "
                    f"TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING (got {DataType.Name(control.data_type)})",
                    at,
                )
                return
            if problem is not None:
                report.error("sequence-control", f"{problem} for {kind_name} for {name}", at)
                return


def _boolean_problem(control: model_config_pb2.ModelSequenceBatching.Control, given: list[str]) -> str | None:
    if not given:
        return "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true'"
    if len(given) > 1:
        return (
            "sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and 'bool_false_true'"
        )
    if len(getattr(control, given[0])) != 2:
        return f"sequence batching control '{given[0]}' must have exactly 2 entries"
    return None


def _typed_problem(given: list[str]) -> str | None:
    if given:
        return "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true'"
    return None
