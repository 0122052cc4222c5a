"""Triton's quick-start models (strings, sequence controls, implicit state) are valid; every
data type runs in the smoke inference; mistakes in sequence controls are caught."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2

from model_repo_check import validate_repository
from model_repo_check.example_models import finish_model
from model_repo_check.onnx_model import ONNX_TO_TRITON
from tests.model_repository.quickstart_models import BUILDERS, build

DataType = model_config_pb2.DataType


@pytest.fixture
def quickstart(tmp_path: Path) -> Path:
    return build(tmp_path / "quickstart")


def test_quickstart_models_validate_clean(quickstart):
    report = validate_repository(quickstart)
    assert report.models == sorted(BUILDERS)
    assert [str(f) for f in report.findings] == []


def test_quickstart_build_is_deterministic(tmp_path):
    first, second = build(tmp_path / "a"), build(tmp_path / "b")
    for name in BUILDERS:
        assert (first / name / "1/model.onnx").read_bytes() == (second / name / "1/model.onnx").read_bytes()


def every_type_repository(target: Path) -> Path:
    """One Identity model per data type Triton has but strings (simple_identity and
    simple_string cover those), bfloat16 included: config and ONNX model agree on each."""
    types = [t for t in ONNX_TO_TRITON if t != TensorProto.STRING]
    names = [TensorProto.DataType.Name(t).lower() for t in types]
    graph = helper.make_graph(
        [helper.make_node("Identity", [f"in_{n}"], [f"out_{n}"]) for n in names],
        "every_type",
        [helper.make_tensor_value_info(f"in_{n}", t, ["batch", 3]) for n, t in zip(names, types, strict=True)],
        [helper.make_tensor_value_info(f"out_{n}", t, ["batch", 3]) for n, t in zip(names, types, strict=True)],
    )
    tensors = [(n, DataType.Name(ONNX_TO_TRITON[t])) for n, t in zip(names, types, strict=True)]
    config = ['name: "every_type"', 'backend: "onnxruntime"', "max_batch_size: 2"]
    config += [f'input {{ name: "in_{n}" data_type: {dt} dims: [3] }}' for n, dt in tensors]
    config += [f'output {{ name: "out_{n}" data_type: {dt} dims: [3] }}' for n, dt in tensors]
    (target / "every_type/1").mkdir(parents=True)
    (target / "every_type/config.pbtxt").write_text("\n".join(config) + "\n")
    onnx.save(finish_model(graph, "Identity over every data type."), str(target / "every_type/1/model.onnx"))
    return target


def test_every_data_type_runs_in_the_smoke_inference(tmp_path):
    repo = every_type_repository(tmp_path / "repo")
    report = validate_repository(repo)
    assert [str(f) for f in report.findings] == []
    config = (repo / "every_type/config.pbtxt").read_text()
    assert "TYPE_BF16" in config and "TYPE_FP16" in config and "TYPE_UINT64" in config


def replace(repo: Path, model: str, old: str, new: str) -> None:
    path = repo / model / "config.pbtxt"
    text = path.read_text()
    assert old in text, f"case out of date: {old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


READY_CONTROL = """    {
      name: "READY"
      control [
        {
          kind: CONTROL_SEQUENCE_READY
          int32_false_true: [ 0, 1 ]
        }
      ]
    }"""


def widen_start(repo: Path) -> None:
    """simple_sequence's START becomes [batch, 2] in the model: not a control shape."""
    path = repo / "simple_sequence/1/model.onnx"
    model = onnx.load(str(path))
    [start] = [i for i in model.graph.input if i.name == "START"]
    start.type.tensor_type.shape.dim[1].dim_value = 2
    onnx.save(model, str(path))


SEQUENCE_MISTAKES = [
    (
        "control-left-out-of-config",
        lambda repo: replace(repo, "simple_sequence", ",\n" + READY_CONTROL, ""),
        "input 'READY' of the ONNX model is not declared in the config (nor as a sequence control or state)",
    ),
    (
        "control-not-in-model",
        lambda repo: replace(repo, "simple_sequence", READY_CONTROL, READY_CONTROL.replace("READY", "CORRID", 1)),
        "sequence control 'CORRID' is not an input of the ONNX model",
    ),
    (
        "control-data-type-differs",
        lambda repo: replace(repo, "simple_dyna_sequence", "data_type: TYPE_UINT64", "data_type: TYPE_INT64"),
        "sequence control 'CORRID' is TYPE_INT64 in the config, TYPE_UINT64 (UINT64) in the ONNX model",
    ),
    (
        "control-true-false-type-differs",
        lambda repo: replace(repo, "simple_state", "bool_false_true: [ false, true ]", "int32_false_true: [ 0, 1 ]"),
        "sequence control 'START' is TYPE_INT32 in the config, TYPE_BOOL (BOOL) in the ONNX model",
    ),
    ("control-not-shape-1", widen_start, "sequence control 'START' has dims [2] in the model"),
    (
        "state-left-out-of-config",
        lambda repo: replace(repo, "simple_state", 'input_name: "INPUT_STATE"', 'input_name: "STATE_IN"'),
        "input 'INPUT_STATE' of the ONNX model is not declared in the config (nor as a sequence control or state)",
    ),
]


@pytest.mark.parametrize(("name", "mutate", "reason"), SEQUENCE_MISTAKES, ids=[m[0] for m in SEQUENCE_MISTAKES])
def test_sequence_mistakes_are_caught(quickstart, name, mutate, reason):
    mutate(quickstart)
    report = validate_repository(quickstart)
    assert any(reason in f.message for f in report.errors), "\n".join(map(str, report.findings))
