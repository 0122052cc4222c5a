"""serving.canary offline: the condition evaluator, the golden file reader and exit codes, Argo's
duration and argument rules, and the step driver's decisions (its analyses scripted)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from serving.canary import golden
from serving.canary.analysis import AnalysisError, RunResult, duration_seconds, resolve_args
from serving.canary.conditions import ConditionError, evaluate
from serving.canary.steps import ABORTED, PAUSED, PROMOTED, StepError, drive

GUARDED = "len(result) == 1 && !isNaN(result[0]) && result[0] <= 1.2"


@pytest.mark.parametrize(
    ("condition", "result", "expected"),
    [
        (GUARDED, [1.2], True),
        (GUARDED, [1.21], False),
        (GUARDED, [], False),
        (GUARDED, [math.nan], False),
        (GUARDED, [1.0, 1.0], False),
        ("result[0] != 2 || !(result[0] > 1)", [2.0], False),
        ("result[0] != 2 || !(result[0] > 1)", [0.5], True),
        ("isInf(result[0]) && result[0] > 0", [math.inf], True),
        ("result[0] >= 0.5 * 2 - 1", [0.0], True),
        ("result[0] > 1", [math.nan], False),
    ],
)
def test_conditions_mean_what_expr_lang_means(condition: str, result: list[float], expected: bool) -> None:
    assert evaluate(condition, result) is expected


@pytest.mark.parametrize(
    ("condition", "message"),
    [
        ("result[0] > 1", "index out of range"),
        ('__import__("os")', "calls are len"),
        ("result.real", "Attribute is not supported"),
        ("result[0] > 'a'", "only numeric literals"),
        ("result[0]", "expected bool"),
        ("result[0] >", "not an expression"),
        ("len(1.0) == 1", "has no len"),
    ],
)
def test_conditions_refuse_what_they_cannot_evaluate(condition: str, message: str) -> None:
    with pytest.raises(ConditionError, match=message):
        evaluate(condition, [] if "index" in message else [1.0])


def test_durations_and_args_follow_argo() -> None:
    assert duration_seconds("1m30s", "x") == 90 and duration_seconds("500ms", "x") == 0.5
    with pytest.raises(AnalysisError, match="interval: '1 minute' is not a duration"):
        duration_seconds("1 minute", "interval")
    template = {"metadata": {"name": "t"}, "spec": {"args": [{"name": "a"}, {"name": "b", "value": "2"}]}}
    assert resolve_args([template], {"a": "1"}) == {"a": "1", "b": "2"}
    with pytest.raises(AnalysisError, match="AnalysisTemplate t: argument 'a' has no value"):
        resolve_args([template], {})


def _golden(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "golden.csv"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x_0,x_1\n1,2\n", ":1: the header must be"),
        ("x_0,x_2,label\n1,2,a\n", ":1: feature columns must be x_0..x_1"),
        ("x_0,x_1,label\n1,2,a\n1,a\n", ":3: 2 fields, the header has 3"),
        ("x_0,x_1,label\n1,z,a\n", ":2: could not convert"),
        ("x_0,x_1,label\n", "no labelled rows"),
    ],
)
def test_a_bad_golden_file_names_its_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(golden.GoldenError, match=message):
        golden.read_golden(_golden(tmp_path, text))


def test_the_shipped_golden_set_reads() -> None:
    shipped = golden.read_golden(Path(__file__).resolve().parents[2] / "model_repository/text-classifier/golden.csv")
    assert shipped.inputs.shape == (1000, 32) and shipped.input_name == "embedding"
    assert set(shipped.labels) == {"negative", "neutral", "positive", "spam"}


def test_golden_exits_2_when_it_cannot_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "--stable",
        "127.0.0.1:1",
        "--canary",
        "127.0.0.1:1",
        "--model",
        "m",
        "--golden",
        str(tmp_path / "none.csv"),
    ]
    assert golden.main(args) == golden.INCONCLUSIVE
    assert "none.csv: cannot read the golden set" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        golden.main([*args, "--max-drop", "-1"])
    assert exited.value.code == 2


def _scripted(*phases: str) -> Callable[[object, object], RunResult]:
    """Stands in for the analysis of each step, in order (the driver's own logic is under test)."""
    remaining = list(phases)

    def analyse(templates: object, args: object) -> RunResult:
        phase = remaining.pop(0)
        return RunResult(phase, "" if phase == "Successful" else f"scripted {phase}", [], [])

    return analyse


STEPS = [
    {"setWeight": 5},
    {
        "analysis": {
            "templates": [{"templateName": "t"}],
            "args": [{"name": "h", "valueFrom": {"podTemplateHashValue": "Latest"}}],
        }
    },
    {"setWeight": 50},
    {"analysis": {"templates": [{"templateName": "t"}]}},
]


@pytest.mark.parametrize(
    ("phases", "outcome", "weights"),
    [
        (["Successful", "Successful"], PROMOTED, [5, 50, 100]),
        (["Failed"], ABORTED, [5, 0]),
        (["Successful", "Error"], ABORTED, [5, 50, 0]),
        (["Inconclusive"], PAUSED, [5]),
    ],
)
def test_the_driver_promotes_aborts_or_pauses(phases: list[str], outcome: str, weights: list[int]) -> None:
    seen: list[int] = []
    decision = drive(
        STEPS, {"t": {}}, {"Stable": "s", "Latest": "c"}, seen.append, _scripted(*phases), log=lambda _: None
    )
    assert decision.outcome == outcome and seen == weights and decision.weight == weights[-1]


def test_the_driver_refuses_unknown_steps_and_templates() -> None:
    with pytest.raises(StepError, match="step 0: \\['experiment'\\] is not"):
        drive([{"experiment": {}}], {}, {}, lambda _: None, _scripted(), log=lambda _: None)
    with pytest.raises(StepError, match="step 0: analysis templates \\['x'\\] not found"):
        drive(
            [{"analysis": {"templates": [{"templateName": "x"}]}}],
            {},
            {},
            lambda _: None,
            _scripted(),
            log=lambda _: None,
        )
