"""Acceptance 1: both example models validate clean, smoke inference included; the build is deterministic."""

import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from model_repo_check import validate_repository
from model_repo_check.example_models import ARTIFACTS, IR_VERSION, OPSET, write_all

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "model_repository"


@pytest.mark.parametrize("gpus", [None, 0, 1, 4])
def test_examples_validate_clean_for_every_target(gpus):
    report = validate_repository(EXAMPLES, gpus)
    assert report.models == ["image-preprocess", "text-classifier"]
    assert [str(f) for f in report.findings] == []


def test_examples_cover_both_batching_styles():
    report = validate_repository(EXAMPLES)
    assert not report.findings
    configs = {p.parent.name: p.read_text() for p in EXAMPLES.glob("*/config.pbtxt")}
    assert "max_batch_size: 16" in configs["text-classifier"]
    assert "dynamic_batching {" in configs["text-classifier"]
    assert "max_batch_size: 0" in configs["image-preprocess"]
    assert all("model_warmup" in text for text in configs.values())


def test_smoke_inference_really_runs(repo):
    """The clean result above includes onnxruntime: a model that cannot run is caught by it."""
    broken = onnx.load(str(repo / "image-preprocess/1/model.onnx"))
    broken.graph.node[1].op_type = "NoSuchOperator"
    onnx.save(broken, str(repo / "image-preprocess/1/model.onnx"))
    codes = [f.code for f in validate_repository(repo).errors]
    assert codes == ["smoke-inference"]


def test_committed_models_are_what_the_builder_builds(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    write_all(first)
    subprocess.run([sys.executable, str(ROOT / "scripts/build_example_models"), str(second)], check=True)
    for artifact in ARTIFACTS:
        built = (first / artifact.relpath).read_bytes()
        assert built == (second / artifact.relpath).read_bytes(), artifact.relpath
        assert built == (EXAMPLES / artifact.relpath).read_bytes(), f"{artifact.relpath}: run make example-models"


def test_models_use_the_fixed_opset_and_ir_version():
    for path in EXAMPLES.glob("*/*/model.onnx"):
        model = onnx.load(str(path))
        assert model.ir_version == IR_VERSION
        assert [(o.domain, o.version) for o in model.opset_import] == [("", OPSET)]
        assert path.stat().st_size < 64 * 1024
