"""What an ansible-playbook run with the json callback really did.

A run can end in four ways that matter to a test: every host finished with no failed task,
a task failed, a host became unreachable, or the run stopped before its recap (killed, timed
out, crashed). The json callback marks only the second with `failed`; an unreachable host
carries `unreachable` instead, and a run cut short has no stats at all. Reading "no task has
`failed`" as success therefore calls an unreachable host a success (issue 18), so every lab
test reads a run through `PlayReport` and asks for its `verdict`.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class TaskResult:
    task: str
    host: str
    message: str


@dataclass(frozen=True)
class Step:
    """One task's outcome on one host, in the order the run reached it."""

    task: str
    host: str
    outcome: str  # ok, changed, skipped, failed, unreachable
    message: str


@dataclass(frozen=True)
class PlayReport:
    returncode: int
    stderr: str
    stats: dict[str, dict[str, int]]
    failed: tuple[TaskResult, ...]
    unreachable: tuple[TaskResult, ...]
    changed: tuple[str, ...]
    incomplete: str  # why there is no full report ("" when the callback wrote its recap)
    steps: tuple[Step, ...] = ()

    @classmethod
    def parse(cls, result: subprocess.CompletedProcess[str]) -> PlayReport:
        failed: list[TaskResult] = []
        unreachable: list[TaskResult] = []
        changed: list[str] = []
        steps: list[Step] = []
        incomplete = ""
        try:
            report = json.loads(result.stdout)
        except json.JSONDecodeError as error:
            report = {}
            incomplete = f"no JSON report on stdout ({error})"
        for play in report.get("plays", []):
            for task in play["tasks"]:
                name = task["task"]["name"]
                for host, outcome in task["hosts"].items():
                    if outcome.get("unreachable"):
                        unreachable.append(TaskResult(name, host, _message(outcome)))
                    elif outcome.get("failed"):
                        failed.append(TaskResult(name, host, _message(outcome)))
                    if outcome.get("changed"):
                        changed.append(name)
                    steps.append(Step(name, host, _outcome(outcome), _message(outcome)))
        stats = report.get("stats") or {}
        if not incomplete and not stats:
            incomplete = "the report has no play recap (stats): the run stopped before its end or matched no host"
        return cls(
            returncode=result.returncode,
            stderr=result.stderr,
            stats=stats,
            failed=tuple(failed),
            unreachable=tuple(unreachable),
            changed=tuple(changed),
            incomplete=incomplete,
            steps=tuple(steps),
        )

    @property
    def succeeded(self) -> bool:
        """Finished with a recap, rc 0, and every host neither failed nor unreachable."""
        return (
            self.returncode == 0
            and not self.incomplete
            and not self.failed
            and not self.unreachable
            and all(s.get("failures", 0) == 0 and s.get("unreachable", 0) == 0 for s in self.stats.values())
        )

    def host_stats(self) -> dict[str, int]:
        """The play recap of the one host of a lab run."""
        (only,) = self.stats.values()
        return only

    def verdict(self) -> str:
        """One line that names what happened; "succeeded" only for a run that truly did."""
        if self.unreachable:
            first = self.unreachable[0]
            return f"{first.host} unreachable at {first.task!r} (rc {self.returncode}): {first.message}"
        if self.failed:
            first = self.failed[0]
            return f"failed at {first.task!r} on {first.host} (rc {self.returncode}): {first.message}"
        if self.incomplete:
            return f"did not finish (rc {self.returncode}): {self.incomplete}; stderr: {self.stderr[-1500:].strip()}"
        if self.returncode != 0:
            return f"exited {self.returncode} with no failed or unreachable host; stderr: {self.stderr[-1500:].strip()}"
        return "succeeded"


def _outcome(outcome: dict[str, object]) -> str:
    for key in ("unreachable", "failed", "skipped", "changed"):
        if outcome.get(key):
            return key
    return "ok"


def _message(outcome: dict[str, object]) -> str:
    message = outcome.get("msg", "")
    text = " ".join(map(str, message)) if isinstance(message, list) else str(message)
    return " ".join(text.split())


def assert_succeeded(result: subprocess.CompletedProcess[str], what: str = "") -> PlayReport:
    """The run's report; fails the test with its verdict unless the run truly succeeded."""
    report = PlayReport.parse(result)
    assert report.succeeded, f"{what}{report.verdict()}"
    return report
