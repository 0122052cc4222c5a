"""Acceptance 2: a corpus of broken repositories, each rejected with the right reason and location.

Each case mutates a fresh copy of model_repository/ (the `repo` fixture). `where` is the
expected location: a path under the repository, and for a place inside a file an anchor
with `^` at the expected line:column (the first occurrence in the mutated file), computed
here from the text independently of the validator.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from model_repo_check import Severity, validate_repository
from model_repo_check.example_models import IR_VERSION, OPSET, text_classifier

TC, IP = "text-classifier", "image-preprocess"
Mutation = Callable[[Path], None]
# The block up to its closing brace at the start of a line: nested messages (the queue policy)
# close indented.
BATCHING_BLOCK = re.compile(r"^dynamic_batching \{.*?^\}\n?", re.MULTILINE | re.DOTALL)


def edit(model: str, old: str, new: str) -> Mutation:
    def apply(repo: Path) -> None:
        path = repo / model / "config.pbtxt"
        text = path.read_text()
        assert old in text, f"corpus case out of date: {old!r} not in {path}"
        path.write_text(text.replace(old, new, 1))

    return apply


def batching(block: str) -> Mutation:
    """Replace text-classifier's whole dynamic_batching block, whatever its tuning is today."""

    def apply(repo: Path) -> None:
        path = repo / TC / "config.pbtxt"
        text, count = BATCHING_BLOCK.subn(block, path.read_text(), count=1)
        assert count == 1, f"corpus case out of date: no dynamic_batching block in {path}"
        path.write_text(text)

    return apply


def move(model: str, old: str, new: str) -> Mutation:
    return lambda repo: (repo / model / old).rename(repo / model / new)


def delete(model: str, name: str) -> Mutation:
    return lambda repo: (repo / model / name).unlink()


def rename_model(old: str, new: str) -> Mutation:
    def apply(repo: Path) -> None:
        edit(old, f'name: "{old}"', f'name: "{new}"')(repo)
        (repo / old).rename(repo / new)

    return apply


def replace_onnx(model: str, build: Callable[[], onnx.ModelProto]) -> Mutation:
    def apply(repo: Path) -> None:
        for path in (repo / model).glob("[0-9]*/model.onnx"):
            onnx.save(build(), str(path))

    return apply


def both(*mutations: Mutation) -> Mutation:
    def apply(repo: Path) -> None:
        for mutation in mutations:
            mutation(repo)

    return apply


def lying_classifier() -> onnx.ModelProto:
    """Declares [batch, 4] outputs but computes [1, 2, 2]: only running it shows that."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], [1, 2, 2])
    graph = helper.make_graph(
        [
            helper.make_node("ConstantOfShape", ["shape"], ["logits"]),
            helper.make_node("ConstantOfShape", ["shape"], ["probabilities"]),
        ],
        "lying_classifier",
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", 32])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 4]),
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 4]),
        ],
        initializer=[shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


@dataclass(frozen=True)
class Case:
    id: str
    mutate: Mutation
    code: str
    reason: str
    where: str
    anchor: str | None = None
    severity: Severity = Severity.ERROR
    gpus: int | None = None


IP_GROUP = "instance_group [\n  {\n    kind: KIND_CPU\n    count: 2\n  }\n]"
TC_CONFIG, IP_CONFIG = f"{TC}/config.pbtxt", f"{IP}/config.pbtxt"

BROKEN = [
    # config.pbtxt that does not parse with the Triton schema: protobuf's own line:column.
    Case(
        "dynamic-batching-in-brackets",
        batching("dynamic_batching [ { preferred_batch_size: [4, 8] } ]\n"),
        "parse",
        "`dynamic_batching` is a single message, not a list",
        TC_CONFIG,
        "dynamic_batching ^[",
    ),
    Case(
        "instance-group-nested-brackets",
        edit(IP, IP_GROUP, "instance_group [ [ { kind: KIND_CPU count: 2 } ] ]"),
        "parse",
        "Nested brackets: a repeated field is written `instance_group [ { ... } ]`",
        IP_CONFIG,
        "instance_group [ ^[",
    ),
    Case(
        "unknown-top-level-field",
        edit(TC, "max_batch_size: 16", "max_batch: 16"),
        "parse",
        'has no field named "max_batch". The schema of Triton 25.04 (tritonclient 2.57.0) has no such field. '
        "Did you mean `max_batch_size`?",
        TC_CONFIG,
        "^max_batch: 16",
    ),
    Case(
        "unknown-nested-field",
        batching("dynamic_batching {\n  max_queue_delay_ms: 200\n}\n"),
        "parse",
        'Message type "inference.ModelDynamicBatching" has no field named "max_queue_delay_ms"',
        TC_CONFIG,
        "^max_queue_delay_ms",
    ),
    Case(
        "lowercase-data-type",
        edit(TC, "data_type: TYPE_FP32\n    dims: [32]", "data_type: type_fp32\n    dims: [32]"),
        "parse",
        "has no value named type_fp32. Enum values are case sensitive: write TYPE_FP32.",
        TC_CONFIG,
        "data_type: ^type_fp32",
    ),
    Case(
        "lowercase-instance-kind",
        edit(IP, "kind: KIND_CPU", "kind: kind_cpu"),
        "parse",
        "Enum values are case sensitive: write KIND_CPU.",
        IP_CONFIG,
        "kind: ^kind_cpu",
    ),
    Case(
        "yaml-style-equals",
        edit(TC, "max_batch_size: 16", "max_batch_size = 16"),
        "parse",
        'Expected ":". A scalar field is written `name: value`',
        TC_CONFIG,
        "max_batch_size ^= 16",
    ),
    Case(
        "scalar-list-without-colon",
        edit(TC, "dims: [32]", "dims [32]"),
        "parse",
        "a list of scalars `name: [ ... ]`",
        TC_CONFIG,
        "dims ^[32]",
    ),
    Case(
        "list-elements-without-comma",
        edit(TC, "    dims: [4]\n  },\n", "    dims: [4]\n  }\n"),
        "parse",
        'Expected ",". Elements of a list are separated by commas',
        TC_CONFIG,
        "  }\n  ^{",
    ),
    Case(
        "scalar-field-twice",
        edit(TC, "max_batch_size: 16", "max_batch_size: 16\nmax_batch_size: 8"),
        "parse",
        'should not have multiple "max_batch_size" fields',
        TC_CONFIG,
        "max_batch_size: ^8",
    ),
    Case(
        "dims-as-string",
        edit(TC, "dims: [32]", 'dims: ["32"]'),
        "parse",
        "Couldn't parse integer",
        TC_CONFIG,
        'dims: [^"32"]',
    ),
    # layout
    Case(
        "version-folder-v1",
        move(IP, "1", "v1"),
        "version-not-numeric",
        "version folder 'v1' is not a number; Triton ignores it",
        f"{IP}/v1",
    ),
    Case("only-non-numeric-versions", move(IP, "1", "v1"), "no-versions", "has no numeric version folder", IP),
    Case(
        "name-differs-from-folder",
        edit(IP, 'name: "image-preprocess"', 'name: "preprocess"'),
        "name-mismatch",
        "name 'preprocess' differs from its folder 'image-preprocess'",
        IP_CONFIG,
        '^name: "preprocess"',
    ),
    Case(
        "model-file-misnamed",
        move(TC, "2/model.onnx", "2/text-classifier.onnx"),
        "missing-model-file",
        "version 2 has no 'model.onnx' (the file the 'onnxruntime' backend loads); found: text-classifier.onnx",
        f"{TC}/2",
    ),
    Case("config-missing", delete(IP, "config.pbtxt"), "missing-config", "has no config.pbtxt", IP),
    Case(
        "platform-and-backend-disagree",
        edit(IP, 'platform: "onnxruntime_onnx"', 'platform: "onnxruntime_onnx"\nbackend: "pytorch"'),
        "platform-backend",
        "platform 'onnxruntime_onnx' is served by backend 'onnxruntime', not 'pytorch'",
        IP_CONFIG,
        '^backend: "pytorch"',
    ),
    Case(
        "no-platform-no-backend",
        edit(TC, 'backend: "onnxruntime"\n', ""),
        "no-backend",
        "neither `platform` nor `backend`",
        TC_CONFIG,
        "^",
    ),
    # the config on its own
    Case(
        "preferred-batch-size-above-max",
        batching("dynamic_batching {\n  preferred_batch_size: [4, 32]\n}\n"),
        "preferred-batch-size",
        "dynamic batching preferred size must be <= max batch size for text-classifier (32 > 16)",
        TC_CONFIG,
        "^preferred_batch_size: [4, 32]",
    ),
    Case(
        "sequence-batching-preferred-above-max",
        batching("sequence_batching { oldest { preferred_batch_size: [64] } }\n"),
        "preferred-batch-size",
        "sequence batching preferred batch size must be <= max batch size for text-classifier (64 > 16)",
        TC_CONFIG,
        "oldest { ^preferred_batch_size",
    ),
    Case(
        "dims-missing",
        edit(IP, "    dims: [3, 224, 224]\n", ""),
        "dims-value",
        "model output 'pixels' must specify 'dims'",
        IP_CONFIG,
        "^output [",
    ),
    Case(
        "dynamic-batching-on-non-batching-model",
        edit(IP, "max_batch_size: 0", "max_batch_size: 0\ndynamic_batching { }"),
        "batching-without-batch-size",
        "dynamic_batching is set but max_batch_size is 0: Triton loads it, but this model cannot batch",
        IP_CONFIG,
        "^dynamic_batching { }",
        severity=Severity.WARNING,
    ),
    Case(
        "labels-file-missing",
        edit(TC, 'label_filename: "labels.txt"', 'label_filename: "classes.txt"'),
        "missing-labels",
        "names label_filename 'classes.txt', which is not in",
        TC_CONFIG,
        '^label_filename: "classes.txt"',
    ),
    Case(
        "warmup-batch-above-max",
        edit(TC, "batch_size: 4", "batch_size: 32"),
        "warmup-batch-size",
        "warmup sample 'zeros_batch_4': batch size 32 for 'text-classifier', max allowed is 16",
        TC_CONFIG,
        "^batch_size: 32",
    ),
    Case(
        "warmup-feeds-unknown-input",
        edit(TC, 'key: "embedding"', 'key: "embeddings"'),
        "warmup-input",
        "expected 1 inputs but got 0 inputs for model 'text-classifier', missing required input(s) ['embedding']",
        TC_CONFIG,
        "^inputs {",
    ),
    Case(
        "cpu-group-lists-gpus",
        edit(IP, "kind: KIND_CPU", "kind: KIND_CPU\n    gpus: [0]"),
        "cpu-group-with-gpus",
        "has kind KIND_CPU but specifies one or more GPUs ([0])",
        IP_CONFIG,
        "^gpus: [0]",
    ),
    Case(
        "negative-gpu-id",
        edit(TC, "kind: KIND_AUTO", "kind: KIND_AUTO\n    gpus: [-1]"),
        "gpu-id-negative",
        "specifies invalid or unsupported gpu id -1: GPU ids are CUDA device indices, 0 and up",
        TC_CONFIG,
        "^gpus: [-1]",
    ),
    Case(
        "zero-dim",
        edit(IP, "dims: [224, 224, 3]", "dims: [224, 0, 3]"),
        "dims-value",
        "model input 'image' dimension must be integer >= 1, or -1 to indicate a variable-size dimension "
        "(dims [224, 0, 3])",
        IP_CONFIG,
        "^dims: [224, 0, 3]",
    ),
    # the ONNX model against its config, and running it
    Case(
        "dims-include-batch-dimension",
        edit(TC, "dims: [32]", "dims: [-1, 32]"),
        "input-shape",
        "dims [-1, 32] include the batch dimension; Triton prepends it when max_batch_size > 0, write dims: [32]",
        TC_CONFIG,
        "^dims: [-1, 32]",
    ),
    Case(
        "onnx-input-name-differs",
        replace_onnx(TC, lambda: text_classifier(input_name="features")),
        "input-name",
        "input 'embedding' is not in the ONNX model (its inputs: features)",
        TC_CONFIG,
        '^name: "embedding"',
    ),
    Case(
        "batching-config-on-model-without-batch-axis",
        edit(IP, "max_batch_size: 0", "max_batch_size: 4"),
        "input-shape",
        "max_batch_size is 4 but the model has no batch dimension (its shape [224, 224, 3])",
        IP_CONFIG,
        "^dims: [224, 224, 3]",
    ),
    Case(
        "model-exported-without-batch-axis",
        replace_onnx(TC, lambda: text_classifier(batch_axis=False)),
        "input-shape",
        "max_batch_size is 16 but the model has no batch dimension (its shape [32])",
        TC_CONFIG,
        "^dims: [32]",
    ),
    Case(
        "batch-axis-but-max-batch-size-0",
        both(edit(TC, "max_batch_size: 16", "max_batch_size: 0"), batching("")),
        "input-shape",
        "the model has a batch axis: set max_batch_size > 0, or dims: [-1, 32]",
        TC_CONFIG,
        "^dims: [32]",
    ),
    Case(
        "data-type-differs",
        edit(IP, "data_type: TYPE_UINT8\n    dims", "data_type: TYPE_FP32\n    dims"),
        "input-dtype",
        "input 'image' is TYPE_FP32 in the config, TYPE_UINT8 (UINT8) in the ONNX model",
        IP_CONFIG,
        "^data_type: TYPE_FP32",
    ),
    Case(
        "minus-one-on-fixed-axis",
        edit(IP, "dims: [224, 224, 3]", "dims: [-1, 224, 3]"),
        "input-shape",
        "axis 0 is -1 in the config shape [-1, 224, 3], 224 in the model [224, 224, 3] (the model axis is fixed",
        IP_CONFIG,
        "^dims: [-1, 224, 3]",
    ),
    Case(
        "output-dims-differ",
        edit(IP, "dims: [3, 224, 224]", "dims: [3, 224, 225]"),
        "output-shape",
        "axis 2 is 225 in the config shape [3, 224, 225], 224 in the model",
        IP_CONFIG,
        "^dims: [3, 224, 225]",
    ),
    Case(
        "output-name-differs",
        edit(IP, 'name: "pixels"', 'name: "pixel"'),
        "output-name",
        "output 'pixel' is not in the ONNX model (its outputs: pixels)",
        IP_CONFIG,
        '^name: "pixel"',
    ),
    Case(
        "outputs-differ-at-run-time",
        replace_onnx(TC, lying_classifier),
        "smoke-output",
        "output 'logits' came back TYPE_FP32[1, 2, 2] from zero inputs, the config declares TYPE_FP32[1, 4]",
        TC_CONFIG,
        "^dims: [4]",
    ),
    # deployment rules
    Case(
        "name-unsafe-in-urls",
        rename_model(IP, "image+preprocess"),
        "url-unsafe-name",
        "model name 'image+preprocess' has characters a URL must percent-encode ('+')",
        "image+preprocess/config.pbtxt",
        '^name: "image+preprocess"',
        severity=Severity.WARNING,
    ),
    Case(
        "kind-gpu-where-no-gpus",
        edit(IP, "kind: KIND_CPU", "kind: KIND_GPU"),
        "gpu-unavailable",
        "instance_group 0 is KIND_GPU but the target environment schedules no GPUs",
        IP_CONFIG,
        "^kind: KIND_GPU",
        gpus=0,
    ),
    Case(
        "kind-gpu-on-a-gpu-the-pod-lacks",
        edit(IP, "kind: KIND_CPU", "kind: KIND_GPU\n    gpus: [1]"),
        "gpu-unavailable",
        "asks for GPU [1] but a Triton pod has 1 GPU(s)",
        IP_CONFIG,
        "^gpus: [1]",
        gpus=1,
    ),
    Case(
        "version-policy-names-missing-version",
        edit(TC, "versions: [1, 2]", "versions: [1, 3]"),
        "version-policy",
        "version_policy serves versions [3] that have no folder (present: [1, 2])",
        TC_CONFIG,
        "^versions: [1, 3]",
        severity=Severity.WARNING,
    ),
    Case(
        "version-policy-latest-more-than-present",
        edit(TC, "specific: { versions: [1, 2] }", "latest: { num_versions: 3 }"),
        "version-policy",
        "version_policy latest asks for 3 versions, only 2 exist",
        TC_CONFIG,
        "^num_versions: 3",
        severity=Severity.WARNING,
    ),
]


def expected_location(repo: Path, case: Case) -> str:
    path = repo / case.where
    if case.anchor is None:
        return str(path)
    text = path.read_text()
    before, after = case.anchor.split("^")
    offset = text.index(before + after) + len(before)
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"{path}:{line}:{column}"


def test_corpus_is_large_enough():
    assert len({case.id for case in BROKEN}) == len(BROKEN) >= 25


@pytest.mark.parametrize("case", BROKEN, ids=lambda case: case.id)
def test_broken_repository_is_rejected(repo, case):
    case.mutate(repo)
    report = validate_repository(repo, case.gpus)
    hits = [f for f in report.findings if f.code == case.code and case.reason in f.message]
    assert hits, f"no {case.code} finding with {case.reason!r}; got:\n" + "\n".join(map(str, report.findings))
    assert {str(f.location) for f in hits} == {expected_location(repo, case)}
    assert all(f.severity is case.severity for f in hits)
    assert report.failed(strict=True)
    assert report.failed(strict=False) is (case.severity is Severity.ERROR)


VALID = [
    ("examples-unchanged", lambda repo: None, None),
    ("angle-bracket-messages", batching("dynamic_batching < preferred_batch_size: 8 >\n"), None),
    (
        "repeated-blocks-instead-of-list",
        edit(IP, IP_GROUP, "instance_group { kind: KIND_CPU }\ninstance_group { kind: KIND_CPU count: 1 }"),
        None,
    ),
    (
        "platform-instead-of-backend",
        edit(TC, 'backend: "onnxruntime"', 'platform: "onnxruntime_onnx"'),
        None,
    ),
    (
        "default-model-filename",
        both(
            edit(IP, "max_batch_size: 0", 'max_batch_size: 0\ndefault_model_filename: "preprocess.onnx"'),
            move(IP, "1/model.onnx", "1/preprocess.onnx"),
        ),
        None,
    ),
    (
        "warmup-from-file",
        both(
            edit(IP, "zero_data: true", 'input_data_file: "image.raw"'),
            lambda repo: (repo / IP / "warmup").mkdir(),
            lambda repo: (repo / IP / "warmup" / "image.raw").write_bytes(bytes(224 * 224 * 3)),
        ),
        None,
    ),
    ("version-policy-all", edit(TC, "specific: { versions: [1, 2] }", "all: {}"), None),
    ("version-policy-latest-two", edit(TC, "specific: { versions: [1, 2] }", "latest { num_versions: 2 }"), None),
    ("kind-gpu-with-gpus", edit(IP, "kind: KIND_CPU", "kind: KIND_GPU\n    gpus: [0]"), 1),
    ("kind-gpu-target-unknown", edit(IP, "kind: KIND_CPU", "kind: KIND_GPU"), None),
    ("kind-auto-without-gpus", lambda repo: None, 0),
    # Model names need not be DNS labels: every model is served through the one Triton Service,
    # and Triton loads and serves these (measured with the real server, see deployment.py).
    ("name-with-capitals-and-dot", rename_model(IP, "Image.Preprocess"), None),
    ("name-with-underscore", rename_model(IP, "image_preprocess"), None),
    ("name-of-a-triton-example", rename_model(IP, "densenet_onnx"), None),
    ("comments-everywhere", edit(TC, "dims: [32]", "dims: [32]  # one sentence embedding\n    # end"), None),
]


@pytest.mark.parametrize(("name", "mutate", "gpus"), VALID, ids=[v[0] for v in VALID])
def test_valid_repository_is_accepted(repo, name, mutate, gpus):
    mutate(repo)
    report = validate_repository(repo, gpus)
    assert [str(f) for f in report.findings] == []
    assert not report.failed(strict=True)
