"""Driver branch lifecycle: NVIDIA's end of life dates on both sides, and the named waiver."""

from __future__ import annotations

from datetime import date

import pytest

from platform_matrix import Problem, check, load, pinned_stack

MATRIX = load()
WAIVER_535 = {"branch": "535", "reason": "Debian 12 packages R535 only"}


def lifecycle(driver: str, on: date, waiver: dict[str, object] | None = None) -> list[Problem]:
    stack = pinned_stack(MATRIX, driver_version=driver, today=on, driver_eol_waiver=waiver)
    return [p for p in check(MATRIX, stack) if p.rule in ("driver_lifecycle", "driver_eol_waiver")]


@pytest.mark.parametrize(
    ("driver", "last_day", "first_day_out"),
    [
        # [dc-support]: R535 LTSB June 2026, R570 PB February 2026, R580 LTSB June 2028, R595 PB March 2027.
        ("535.216.03", date(2026, 6, 30), date(2026, 7, 1)),
        ("570.133.20", date(2026, 2, 28), date(2026, 3, 1)),
        ("580.105.08", date(2028, 6, 30), date(2028, 7, 1)),
        ("595.45.04", date(2027, 3, 31), date(2027, 4, 1)),
    ],
)
def test_a_branch_is_supported_through_the_last_day_of_its_end_of_life_month(
    driver: str, last_day: date, first_day_out: date
) -> None:
    assert lifecycle(driver, last_day) == []
    [problem] = lifecycle(driver, first_day_out)
    assert problem.rule == "driver_lifecycle"
    assert f"reached its end of life on {last_day.isoformat()}" in problem.message
    assert problem.fields == ("driver_version", "driver_eol_waiver")


def test_the_message_names_the_supported_branches_and_the_waiver_to_write() -> None:
    [problem] = lifecycle("535.216.03", date(2026, 12, 3))
    assert "R535 (long-term support branch) reached its end of life on 2026-06-30" in problem.message
    assert 'pin a supported branch (R580, R595) or accept R535 explicitly with a waiver {branch: "535"' in (
        problem.message
    )


@pytest.mark.parametrize(
    ("driver", "reason"),
    [
        ("550.54.15", "R550 is past its end of life (NVIDIA lists it as end of life)"),
        ("470.256.02", "R470 is past its end of life"),
        ("575.51.03", "R575 is a new feature branch"),
        ("599.01", "R599 has no entry in nvidia_driver.branches"),
    ],
)
def test_ended_new_feature_and_unknown_branches_are_refused_whatever_the_day(driver: str, reason: str) -> None:
    [problem] = lifecycle(driver, date(2024, 1, 1))
    assert reason in problem.message


def test_a_waiver_naming_the_branch_with_a_reason_accepts_it() -> None:
    assert lifecycle("535.216.03", date(2026, 12, 3), WAIVER_535) == []


def test_a_waiver_for_another_branch_does_not() -> None:
    [problem] = lifecycle("470.256.02", date(2026, 12, 3), WAIVER_535)
    assert problem.rule == "driver_lifecycle"
    assert "the waiver names R535, not R470" in problem.message


def test_a_waiver_on_a_supported_branch_changes_nothing() -> None:
    assert lifecycle("580.105.08", date(2026, 12, 3), WAIVER_535) == []


@pytest.mark.parametrize(
    ("waiver", "complaint"),
    [
        ({"branch": "535"}, "reason must say why"),
        ({"branch": "535", "reason": "  "}, "reason must say why"),
        ({"reason": "lab"}, "branch must name the waived driver branch"),
        ({"branch": "R535", "reason": "lab"}, "branch must name the waived driver branch"),
        ({**WAIVER_535, "expires": "soon"}, "expires must be a date (YYYY-MM-DD), got 'soon'"),
        ({**WAIVER_535, "owner": "me"}, "unknown key(s) owner"),
    ],
)
def test_an_incomplete_waiver_is_named_and_accepts_nothing(waiver: dict[str, object], complaint: str) -> None:
    problems = lifecycle("535.216.03", date(2026, 12, 3), waiver)
    assert [p.rule for p in problems] == ["driver_eol_waiver", "driver_lifecycle"]
    assert complaint in problems[0].message
    assert problems[0].fields == ("driver_eol_waiver",)


@pytest.mark.parametrize("expires", [date(2026, 12, 31), "2026-12-31"])
def test_a_waiver_holds_through_its_expiry_day(expires: object) -> None:
    waiver = {**WAIVER_535, "expires": expires}
    assert lifecycle("535.216.03", date(2026, 12, 31), waiver) == []
    problems = lifecycle("535.216.03", date(2027, 1, 1), waiver)
    assert [p.rule for p in problems] == ["driver_eol_waiver", "driver_lifecycle"]
    assert "the waiver expired on 2026-12-31" in problems[0].message


def test_an_integer_branch_in_a_waiver_counts() -> None:
    assert lifecycle("535.216.03", date(2026, 12, 3), {"branch": 535, "reason": "lab"}) == []


def test_the_shipped_lifecycle_covers_every_pin_and_forward_compat_branch() -> None:
    branches = MATRIX.data["nvidia_driver"]["branches"]
    named = {MATRIX.driver_version.split(".")[0]}
    named |= {MATRIX.source_driver_version(s).split(".")[0] for s in MATRIX.data["nvidia_driver"]["sources"]}
    for release in MATRIX.data["triton"]["releases"].values():
        named |= {str(release["min_driver_branch"])} | {c.split(".")[0] for c in release["forward_compat"]}
    assert named <= set(branches), sorted(named - set(branches))
