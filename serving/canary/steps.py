"""A Rollout's canary steps, driven as Argo Rollouts drives them, against a traffic split.

Steps are the Rollout's `spec.strategy.canary.steps` (setWeight, analysis; pause with a
duration is waited, an indefinite pause stops the drive as Paused; setCanaryScale is noted and
left to the caller, whose canary already runs). An analysis step resolves its
templates by name and its args (`value`, or `valueFrom.podTemplateHashValue: Stable | Latest`
from the two tracks' hashes), runs them, and:

- Successful: next step; after the last step the canary is promoted (weight 100);
- Failed or Error: abort, the weight goes back to 0 (all traffic to stable);
- Inconclusive: the Rollout pauses at its current weight (never promoted without a human).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from serving.canary.analysis import ERROR, FAILED, INCONCLUSIVE, SUCCESSFUL, RunResult, duration_seconds

PROMOTED, ABORTED, PAUSED = "Promoted", "Aborted", "Paused"
Analyse = Callable[[Sequence[Mapping[str, Any]], Mapping[str, str]], RunResult]


class StepError(ValueError):
    """A step the controller would refuse; the message names the step."""


@dataclass
class Decision:
    outcome: str
    weight: int
    step: int  # index of the step where the drive ended (len(steps) when promoted)
    timeline: list[str] = field(default_factory=list)
    runs: list[RunResult] = field(default_factory=list)


def _args(step: int, given: Sequence[Mapping[str, Any]], hashes: Mapping[str, str]) -> dict[str, str]:
    args: dict[str, str] = {}
    for arg in given:
        if "value" in arg:
            args[arg["name"]] = arg["value"]
            continue
        source = arg.get("valueFrom", {}).get("podTemplateHashValue")
        if source not in hashes:
            raise StepError(
                f"step {step}: argument {arg.get('name')!r} needs a value or podTemplateHashValue Stable/Latest"
            )
        args[arg["name"]] = hashes[source]
    return args


def drive(
    steps: Sequence[Mapping[str, Any]],
    templates: Mapping[str, Mapping[str, Any]],
    hashes: Mapping[str, str],
    set_weight: Callable[[int], None],
    analyse: Analyse,
    log: Callable[[str], None] = print,
) -> Decision:
    """Run the steps; `hashes` maps "Stable" and "Latest" to the tracks' pod-template hashes."""
    began = time.monotonic()
    decision = Decision(PAUSED, 0, 0)

    def note(text: str) -> None:
        line = f"t={time.monotonic() - began:6.1f}s weight={decision.weight:>3}% {text}"
        decision.timeline.append(line)
        log(line)

    for index, step in enumerate(steps):
        decision.step = index
        if "setWeight" in step:
            decision.weight = int(step["setWeight"])
            set_weight(decision.weight)
            note(f"step {index}: setWeight {decision.weight}")
        elif "setCanaryScale" in step:
            note(f"step {index}: setCanaryScale {step['setCanaryScale']}")
        elif "pause" in step:
            wait = step["pause"].get("duration") if step["pause"] else None
            if wait is None:
                note(f"step {index}: pause without duration -> {PAUSED}")
                return decision
            time.sleep(duration_seconds(str(wait), f"step {index} pause.duration"))
            note(f"step {index}: paused {wait}")
        elif "analysis" in step:
            names = [ref["templateName"] for ref in step["analysis"].get("templates", [])]
            missing = [name for name in names if name not in templates]
            if not names or missing:
                raise StepError(f"step {index}: analysis templates {missing or names} not found")
            args = _args(index, step["analysis"].get("args", []), hashes)
            note(f"step {index}: analysis {', '.join(names)}")
            run = analyse([templates[name] for name in names], args)
            decision.runs.append(run)
            note(f"step {index}: analysis {run.phase}{': ' + run.message if run.message else ''}")
            if run.phase in (FAILED, ERROR):
                decision.outcome, decision.weight = ABORTED, 0
                set_weight(0)
                note(f"{ABORTED}: all traffic back to stable")
                return decision
            if run.phase == INCONCLUSIVE:
                note(f"{PAUSED}: inconclusive analysis, waiting for a human (promote or abort)")
                return decision
            if run.phase != SUCCESSFUL:
                raise StepError(f"step {index}: analysis ended {run.phase}")
        else:
            raise StepError(f"step {index}: {sorted(step)} is not setWeight, setCanaryScale, pause or analysis")
    decision.outcome, decision.weight, decision.step = PROMOTED, 100, len(steps)
    set_weight(100)
    note(f"{PROMOTED}: canary at 100%")
    return decision
