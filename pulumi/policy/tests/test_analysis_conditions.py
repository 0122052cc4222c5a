"""analysis_conditions: expr-lang's grammar, types and run-time errors on the subset, and Argo
Rollouts' EvaluateResult on top of them (expectations from expr-lang's parser/operator tables,
checker and vm/runtime Fetch, and argo-rollouts' utils/evaluate/evaluate.go)."""

import math

import pytest
from analysis_conditions import (
    ERROR,
    FAILED,
    INCONCLUSIVE,
    SUCCESSFUL,
    ConditionError,
    UnsupportedCondition,
    evaluate,
    measure,
)

NAN = math.nan


@pytest.mark.parametrize(
    ("condition", "result", "value"),
    [
        # Precedence: unary ! (50) binds tighter than == (20); unary - (90) tighter than * (60).
        ("!isNaN(result[0]) == true", [NAN], False),
        ("-result[0] * 2 == -4", [2.0], True),
        ("true || true && false", [], True),  # && (15) before || (10)
        ("(true || true) && false", [], False),
        ("1 + 2 * 3 == 7 && 7 - 2 - 1 == 4", [], True),  # left associative
        ("1 < result[0] < 3", [2.0], True),  # chained: 1 < r && r < 3
        ("1 < result[0] < 3", [3.0], False),
        ("not (result[0] > 1) and len(result) == 1", [0.5], True),
        # Indexing: negative indices count from the end.
        ("result[-1] == 3", [1.0, 2.0, 3.0], True),
        ("result[len(result) - 1] == 3", [1.0, 2.0, 3.0], True),
        # Go's float comparisons: false with NaN, but !=.
        ("result[0] == result[0]", [NAN], False),
        ("result[0] != result[0]", [NAN], True),
        ("result[0] >= 0 || result[0] < 0", [NAN], False),
        # Division is float64: by zero it is Inf (or NaN), not an error.
        ("isInf(result[0] / 0) && 1 / 0 > 0", [1.0], True),
        ("isNaN(0 / 0)", [], True),
        ("1 / 2 == 0.5", [], True),  # int / int is a float
        ("all(result, {# > 0}) && !any(result, # > 2)", [1.0, 2.0], True),
        ("all(result, # > 0)", [], True),
        ("any(result, # > 0)", [], False),
        ("result > 0.5", 0.7, True),  # a Prometheus scalar arrives as a float
    ],
)
def test_values(condition: str, result: object, value: bool) -> None:
    assert evaluate(condition, result) is value


@pytest.mark.parametrize(
    ("condition", "result", "message"),
    [
        ("result[0] > 1", [], "index out of range: 0 (array length is 0)"),
        ("result[-2] > 1", [1.0], "index out of range: -1 (array length is 1)"),
        # Types are checked first: the branch && would skip still fails.
        ("len(result) == 1 && result[0] == true", [], "invalid operation: == (mismatched types float and bool)"),
        ("false && result == 1", [1.0], "invalid operation: == (mismatched types list and int)"),
        ("len(result) && true", [], "invalid operation: && (mismatched types int and bool)"),
        ("!result[0]", [1.0], "invalid operation: ! (mismatched types float)"),
        ("result[0.5] > 1", [1.0], "array elements can only be selected using an integer"),
        ("result[0][0] > 1", [1.0], "type float does not support indexing"),
        ("len(result)", [1.0], "expected bool, but got int"),
        ("len(result) == 1", 0.7, "invalid argument for len (type float)"),
        ("isNaN(result)", [1.0], "cannot use list as argument (type float64) to call isNaN"),
        ("(result[0] > 1", [1.0], "expected ')', found 'the end'"),
        ("isNaN(result[0], 1)", [1.0], "expected ')', found ','"),
    ],
)
def test_what_expr_lang_refuses_is_a_condition_error(condition: str, result: object, message: str) -> None:
    with pytest.raises(ConditionError) as raised:
        evaluate(condition, result)
    assert str(raised.value) == f"{condition!r}: {message}"


@pytest.mark.parametrize(
    ("condition", "message"),
    [
        ('result[0] > "1"', "'\"' at offset 12 is outside the subset"),
        ("result[0] ?? 1 > 0", "'?' at offset 10 is outside the subset"),
        ("result[0] in [1]", "'in' is outside the subset"),
        ("result.value > 1", "'.' at offset 6 is outside the subset"),
        ("asFloat(result[0]) > 1", "function 'asFloat' is outside the subset"),
        ("quantile > 1", "unknown name 'quantile' (the subset has `result`)"),
        ("result[0] % 2 == 1", "'%' at offset 10 is outside the subset"),
        ("# > 1", "'#' is outside the subset"),
    ],
)
def test_syntax_outside_the_subset_is_named(condition: str, message: str) -> None:
    with pytest.raises(UnsupportedCondition) as raised:
        evaluate(condition, [1.0])
    assert str(raised.value) == f"{condition!r}: {message}"


GUARD = "len(result) == 1 && !isNaN(result[0]) && "
SUCCESS, FAILURE = GUARD + "result[0] <= 1.2", GUARD + "result[0] > 1.2"


@pytest.mark.parametrize(
    ("success", "failure", "result", "phase"),
    [
        (SUCCESS, FAILURE, [1.0], SUCCESSFUL),
        (SUCCESS, FAILURE, [1.3], FAILED),
        (SUCCESS, FAILURE, [], INCONCLUSIVE),
        (SUCCESS, FAILURE, [NAN], INCONCLUSIVE),
        (SUCCESS, FAILURE, [1.0, 1.0], INCONCLUSIVE),  # two series: not a ratio to decide on
        ("result[0] <= 1.2", FAILURE, [], ERROR),
        (SUCCESS, None, [], FAILED),  # the failure is the success's negation
        (None, FAILURE, [], SUCCESSFUL),  # and the other way round
        (None, None, [], SUCCESSFUL),
        ("", "", [NAN], SUCCESSFUL),  # an empty condition is no condition
        ("true", "true", [1.0], FAILED),  # a failure wins over a success
    ],
)
def test_measurements_take_argo_rollouts_phases(success: str, failure: str, result: list[float], phase: str) -> None:
    assert measure(success, failure, result).phase == phase


def test_an_error_measurement_carries_the_message() -> None:
    outcome = measure("result[0] <= 1.2", FAILURE, [])
    assert outcome.error == "'result[0] <= 1.2': index out of range: 0 (array length is 0)"
