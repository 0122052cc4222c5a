"""The differential record: what the real Triton says of each corpus case, and where the two
engines disagree today, with the reason. test_triton_engine.py checks every entry against the
running server (tritonserver 2.51.0, release 24.10, from .venv-triton), so the record cannot go
stale silently: a rule fixed on either side makes its entry fail until it is updated here.

Measured 2026-12-03 on this machine (CPU only). Model names in Triton's messages carry the
test's `<case>--` prefix, so the fragments below leave them out.

How to read a disagreement: the goal of issue 12 is that the rules engine rejects exactly what
Triton rejects. "rules stricter" entries are rules to drop or turn into warnings, "stand-in"
entries are Triton checks that run in the C++ onnxruntime backend, which the serving lab's
Python stand-in (model_repo_check/tritonserver/backends/onnxruntime) does not do, so this engine cannot confirm the
rules engine there; "target" entries depend on the environment's GPUs, which no engine on this
machine sees.
"""

from __future__ import annotations

from dataclasses import dataclass

from model_repo_check.triton_engine import Status


@dataclass(frozen=True)
class Expected:
    """Triton's verdict on a corpus case. `says`: a fragment of its message. `why`: set exactly
    when the rules engine's verdict differs. `crash_prone`: Triton 2.51 may die on this load
    (a failed warmup in the Python backend) on every try, instead of answering."""

    triton: Status
    says: str = ""
    why: str = ""
    crash_prone: bool = False


FAILED, OK, NOT_CHECKABLE = Status.FAILED, Status.OK, Status.NOT_CHECKABLE
PARSE = "protobuf: Error parsing text-format inference.ModelConfig: "

TRITON: dict[str, Expected] = {
    # config.pbtxt that does not parse: Triton's C++ protobuf says where (its positions can
    # differ from the Python parser's: an unknown enum value is reported at the next field).
    "dynamic-batching-in-brackets": Expected(FAILED, 'Expected "{", found "[".'),
    "instance-group-nested-brackets": Expected(FAILED, PARSE + '21:18: Expected "{", found "[".'),
    "unknown-top-level-field": Expected(FAILED, 'Message type "inference.ModelConfig" has no field named "max_batch"'),
    "unknown-nested-field": Expected(
        FAILED, 'Message type "inference.ModelDynamicBatching" has no field named "max_queue_delay_ms"'
    ),
    "lowercase-data-type": Expected(FAILED, 'Unknown enumeration value of "type_fp32" for field "data_type"'),
    "lowercase-instance-kind": Expected(
        FAILED, PARSE + '24:5: Unknown enumeration value of "kind_cpu" for field "kind"'
    ),
    "yaml-style-equals": Expected(FAILED, 'Expected ":", found "=".'),
    "scalar-list-without-colon": Expected(FAILED, 'Expected ":", found "[".'),
    "list-elements-without-comma": Expected(FAILED, 'Expected ",", found "{".'),
    "scalar-field-twice": Expected(FAILED, 'Non-repeated field "max_batch_size" is specified multiple times.'),
    "dims-as-string": Expected(FAILED, 'Expected integer, got: "32"'),
    # layout
    "version-folder-v1": Expected(FAILED, "at least one version must be available under the version policy"),
    "only-non-numeric-versions": Expected(FAILED, "at least one version must be available under the version policy"),
    "name-differs-from-folder": Expected(FAILED, "for model 'preprocess', directory name must equal model name"),
    "model-file-misnamed": Expected(FAILED, "text-classifier/2/model.onnx failed. File doesn't exist"),
    "config-missing": Expected(FAILED, "failed to open text file for read"),
    "platform-and-backend-disagree": Expected(
        FAILED, "unexpected 'platform' and 'backend' pair, got:onnxruntime_onnx, pytorch"
    ),
    "no-platform-no-backend": Expected(
        OK,
        why="rules stricter: with neither platform nor backend, Triton core picks the backend from the version "
        "folder's file (model.onnx: onnxruntime; AutoCompleteBackendFields, run even with "
        "--disable-auto-complete-config)",
    ),
    # the config on its own
    "preferred-batch-size-above-max": Expected(FAILED, "dynamic batching preferred size must be <= max batch size"),
    "sequence-batching-preferred-above-max": Expected(
        FAILED, "sequence batching preferred batch size must be <= max batch size"
    ),
    "dims-missing": Expected(FAILED, "model output 'pixels' must specify 'dims'"),
    "dynamic-batching-on-non-batching-model": Expected(OK),  # a warning of the rules engine: Triton loads it
    "labels-file-missing": Expected(FAILED, "failed to open text file for read"),
    "warmup-batch-above-max": Expected(
        FAILED, "failed to run warmup sample 'zeros_batch_4': batch size 32 for", crash_prone=True
    ),
    "warmup-feeds-unknown-input": Expected(FAILED, "expected 1 inputs but got 0 inputs", crash_prone=True),
    "cpu-group-lists-gpus": Expected(FAILED, "has kind KIND_CPU but specifies one or more GPUs"),
    # KIND_AUTO becomes KIND_CPU where Triton sees no GPU (here), which refuses any gpus; on a GPU
    # host it becomes KIND_GPU, which refuses -1 as an invalid gpu id. Refused either way.
    "negative-gpu-id": Expected(FAILED, "has kind KIND_CPU but specifies one or more GPUs"),
    "zero-dim": Expected(FAILED, "model input 'image' dimension must be integer >= 1, or -1"),
    # the ONNX model against its config: Triton's C++ onnxruntime backend compares them when it
    # loads the model; the Python stand-in does not, so here only the warmup can catch them.
    "dims-include-batch-dimension": Expected(FAILED, "unexpected shape for input 'embedding'", crash_prone=True),
    "onnx-input-name-differs": Expected(
        FAILED, "Required inputs (['features']) are missing from input feed", crash_prone=True
    ),
    "batching-config-on-model-without-batch-axis": Expected(
        FAILED, "Invalid rank for input: image Got: 4 Expected: 3", crash_prone=True
    ),
    "model-exported-without-batch-axis": Expected(FAILED, "Invalid rank for input: embedding", crash_prone=True),
    "batch-axis-but-max-batch-size-0": Expected(
        FAILED, "failed to run warmup sample 'zeros_batch_4': batch size 4 for", crash_prone=True
    ),
    "data-type-differs": Expected(FAILED, "inference input 'image' data-type is 'UINT8', but model", crash_prone=True),
    "minus-one-on-fixed-axis": Expected(
        OK,
        why="stand-in: Triton's C++ onnxruntime backend refuses a -1 where the model's axis is fixed "
        "(CompareDimsSupported); the Python stand-in runs warmup with a 224, which fits",
    ),
    "output-dims-differ": Expected(
        OK,
        why="stand-in: Triton's C++ onnxruntime backend compares output dims with the model's; the Python "
        "stand-in does not, and Triton core does not check outputs at warmup",
    ),
    "output-name-differs": Expected(FAILED, "Invalid output name:pixel", crash_prone=True),
    "outputs-differ-at-run-time": Expected(
        OK,
        why="rules stricter, on purpose: the model declares the config's shapes and computes others; Triton "
        "(its C++ backend too) compares declared shapes at load and fails only the requests, the rules "
        "engine's smoke inference runs the model",
    ),
    # deployment rules
    "name-unsafe-in-urls": Expected(OK),  # a warning of the rules engine: Triton loads it, HTTP clients miss it
    "kind-gpu-where-no-gpus": Expected(
        NOT_CHECKABLE,
        "has kind KIND_GPU but no GPUs are available",
        why="target: the rule is about the target environment (--gpus 0); Triton on this CPU-only machine "
        "refuses any KIND_GPU, so the engine reports it as not checkable here",
    ),
    "kind-gpu-on-a-gpu-the-pod-lacks": Expected(
        NOT_CHECKABLE,
        "specifies invalid or unsupported gpu id 1",
        why="target: the rule is about the target's GPUs per pod (--gpus 1); this machine has none",
    ),
    "version-policy-names-missing-version": Expected(OK),  # a warning of the rules engine: Triton loads it
    "version-policy-latest-more-than-present": Expected(OK),  # a warning of the rules engine; Triton loads both
}
