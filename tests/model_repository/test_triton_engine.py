"""The triton engine: the real tritonserver 2.51 judges the examples, Triton's quick-start models
and every corpus case; where it and the rules engine disagree is recorded in
triton_differential.py. Needs .venv-triton (`make .venv-triton/.stamp`); about a minute here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from model_repo_check import validate_repository
from model_repo_check.triton_engine import Status, TritonReport, Verdict, check_with_triton
from tests.model_repository.differential import LAB_RELEASE
from tests.model_repository.quickstart_models import BUILDERS, build
from tests.model_repository.test_corpus import BROKEN, Case
from tests.model_repository.triton_batch import judge_cases
from tests.model_repository.triton_differential import TRITON

pytestmark = pytest.mark.serving_lab

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "model_repository"
SCRIPT = ROOT / "scripts/validate_model_repo"
CRASHED = "tritonserver died while loading it"


def test_examples_validate_clean_under_both_engines():
    assert [str(f) for f in validate_repository(EXAMPLES).findings] == []
    report = check_with_triton(EXAMPLES)
    assert (report.server_version, report.release) == ("2.51.0", "24.10")
    assert [(v.model, v.status, v.message) for v in report.verdicts] == [
        ("image-preprocess", Status.OK, ""),
        ("text-classifier", Status.OK, ""),
    ]


def test_quickstart_models_load_in_triton(tmp_path):
    report = check_with_triton(build(tmp_path / "quickstart"))
    assert {v.model: (v.status, v.message) for v in report.verdicts} == {name: (Status.OK, "") for name in BUILDERS}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[TritonReport, dict[str, Verdict], dict[str, bool]]:
    """Every corpus case through one tritonserver, and the rules engine's verdict (errors fail)."""
    work = tmp_path_factory.mktemp("triton-corpus")
    pristine = work / "pristine"
    shutil.copytree(EXAMPLES, pristine, ignore=shutil.ignore_patterns("README.md"))
    report, verdicts = judge_cases([(case.id, case.mutate) for case in BROKEN], pristine, work)
    rules = {
        case.id: validate_repository(work / "cases" / case.id, case.gpus, LAB_RELEASE).failed(strict=False)
        for case in BROKEN
    }
    return report, verdicts, rules


def test_the_record_covers_the_corpus():
    assert set(TRITON) == {case.id for case in BROKEN}


@pytest.mark.parametrize("case", BROKEN, ids=lambda case: case.id)
def test_triton_says_what_the_record_says(corpus, case: Case):
    verdict, expected = corpus[1][case.id], TRITON[case.id]
    if expected.crash_prone and verdict.message.startswith(CRASHED):
        assert verdict.status is Status.FAILED  # Triton died on every try: still no load
        return
    assert verdict.status is expected.triton, verdict
    assert expected.says in verdict.message, verdict


@pytest.mark.parametrize("case", BROKEN, ids=lambda case: case.id)
def test_every_disagreement_is_recorded(corpus, case: Case):
    rules_failed, triton_failed = corpus[2][case.id], corpus[1][case.id].status is Status.FAILED
    expected = TRITON[case.id]
    assert (rules_failed != triton_failed) == bool(expected.why), (
        f"rules engine {'fails' if rules_failed else 'passes'} it, Triton {corpus[1][case.id]}; "
        f"recorded reason: {expected.why or 'none'}"
    )


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False)


def test_cli_reports_tritons_verdict_per_model(repo):
    config = repo / "text-classifier/config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size: 16", "max_batch_size: 16\nmax_batch_size: 8"))
    gpu = repo / "image-preprocess/config.pbtxt"
    gpu.write_text(gpu.read_text().replace("kind: KIND_CPU", "kind: KIND_GPU"))
    text = run(str(repo), "--engine", "triton")
    assert text.returncode == 1, text.stdout + text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith(f"{repo}/image-preprocess: not checkable here (")
    assert "has kind KIND_GPU but no GPUs are available" in lines[0]
    [failed] = [line for line in lines if line.startswith(f"{repo}/text-classifier: FAILED")]
    assert 'Non-repeated field "max_batch_size" is specified multiple times.' in failed
    assert lines[-1] == (
        f"{repo}: tritonserver 2.51.0 (release 24.10), 2 model(s), 1 failed, 1 not checkable here: FAILED"
    )
    document = json.loads(run(str(repo), "--engine", "triton", "--format", "json").stdout)
    assert (document["engine"], document["release"], document["ok"]) == ("triton", "24.10", False)
    assert [(v["model"], v["status"]) for v in document["verdicts"]] == [
        ("image-preprocess", "not checkable"),
        ("text-classifier", "failed"),
    ]


def test_cli_not_checkable_fails_only_with_strict(repo):
    gpu = repo / "image-preprocess/config.pbtxt"
    gpu.write_text(gpu.read_text().replace("kind: KIND_CPU", "kind: KIND_GPU"))
    shutil.rmtree(repo / "text-classifier")
    assert run(str(repo), "--engine", "triton").returncode == 0
    strict = run(str(repo), "--engine", "triton", "--strict")
    assert strict.returncode == 1
    assert strict.stdout.splitlines()[-1].endswith("0 failed, 1 not checkable here: FAILED")
