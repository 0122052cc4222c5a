"""What `kubectl argo rollouts promote|pause|abort` send for a Rollout, reproduced from the
plugin's source (github.com/argoproj/argo-rollouts, pkg/kubectl-argo-rollouts/cmd/<command>/), and
a summary of a Rollout for `status`. Pure functions over the Rollout as the API returns it (a dict).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from serving.runbook.kube import Patch


@dataclass(frozen=True)
class StatusFirst:
    """The plugin's order: `status` on the status subresource first; if that answers 404 (a
    Rollouts release without the subresource), `fallback` replaces `spec`; then `spec`."""

    status: Patch | None
    spec: Patch | None
    fallback: Patch | None

    def empty(self) -> bool:
        return self.status is None and self.spec is None


def _status(ro: dict[str, Any]) -> dict[str, Any]:
    return ro.get("status") or {}


def _canary(ro: dict[str, Any]) -> dict[str, Any] | None:
    return ((ro.get("spec") or {}).get("strategy") or {}).get("canary")


def _steps(ro: dict[str, Any]) -> list[dict[str, Any]]:
    return (_canary(ro) or {}).get("steps") or []


def _next_step_index(ro: dict[str, Any]) -> int | None:
    """replicasetutil.GetCurrentCanaryStep's index plus one, capped at len(steps); None without steps."""
    steps = _steps(ro)
    if _canary(ro) is None or not steps:
        return None
    index = _status(ro).get("currentStepIndex") or 0
    return index + 1 if index < len(steps) else index


def _inconclusive(ro: dict[str, Any]) -> bool:
    run = (_status(ro).get("canary") or {}).get("currentStepAnalysisRunStatus") or {}
    return _canary(ro) is not None and run.get("status") == "Inconclusive"


def promote(ro: dict[str, Any], full: bool) -> StatusFirst:
    """promote.go getPatches (without the deprecated --skip-* flags)."""
    name = ro["metadata"]["name"]
    status = _status(ro)
    paused = bool((ro.get("spec") or {}).get("paused"))
    spec_patch = Patch(name, {"spec": {"paused": False}}) if paused else None
    status_body: dict[str, Any] | None = None
    if full:
        if status.get("currentPodHash") != status.get("stableRS"):
            status_body = {"status": {"promoteFull": True}}
        unified = {"spec": {"paused": False}, "status": {"promoteFull": True}}
    else:
        unified = {"spec": {"paused": False}, "status": {"pauseConditions": None}}
        conditions = status.get("pauseConditions") or []
        if _inconclusive(ro) and conditions and status.get("controllerPause"):
            if (index := _next_step_index(ro)) is not None:
                status_body = {"status": {"pauseConditions": None, "controllerPause": False, "currentStepIndex": index}}
        elif conditions:
            status_body = {"status": {"pauseConditions": None}}
        elif (index := _next_step_index(ro)) is not None:
            status_body = {"status": {"pauseConditions": None, "currentStepIndex": index}}
            unified = {"spec": {"paused": False}, "status": {"pauseConditions": None, "currentStepIndex": index}}
    status_patch = Patch(name, status_body, "status") if status_body else None
    return StatusFirst(status_patch, spec_patch, Patch(name, unified) if status_patch else None)


def abort(name: str) -> StatusFirst:
    """abort.go: status.abort through the status subresource, the same patch on the object on 404."""
    body = {"status": {"abort": True}}
    return StatusFirst(Patch(name, body, "status"), None, Patch(name, body))


def pause(name: str) -> Patch:
    """pause.go: spec.paused, on the object itself."""
    return Patch(name, {"spec": {"paused": True}})


def _step_text(step: dict[str, Any]) -> str:
    if "setWeight" in step:
        return f"setWeight {step['setWeight']}"
    if "analysis" in step:
        templates = ", ".join(t.get("templateName", "?") for t in step["analysis"].get("templates") or [])
        return f"analysis ({templates})"
    if "pause" in step:
        duration = (step["pause"] or {}).get("duration")
        return f"pause {duration}" if duration else "pause (until promoted)"
    return ", ".join(step) or "(empty step)"


def summary(ro: dict[str, Any]) -> list[str]:
    """The lines `status` prints for a Rollout."""
    meta, spec, status = ro["metadata"], ro.get("spec") or {}, _status(ro)
    phase = status.get("phase") or "(not reported)"
    lines = [f"Rollout {meta.get('namespace', '?')}/{meta['name']}"]
    lines.append(f"  phase:    {phase}" + (f" ({status['message']})" if status.get("message") else ""))
    steps = _steps(ro)
    index = status.get("currentStepIndex") or 0
    if not steps:
        lines.append("  step:     (no canary steps)")
    elif index >= len(steps):
        lines.append(f"  step:     all {len(steps)} steps done")
    else:
        lines.append(f"  step:     {index + 1}/{len(steps)}: {_step_text(steps[index])}")
    run = (status.get("canary") or {}).get("currentStepAnalysisRunStatus")
    if run:
        lines.append(f"  analysis: {run.get('name', '?')}: {run.get('status', '?')} {run.get('message', '')}".rstrip())
    weights = (status.get("canary") or {}).get("weights")
    if weights:
        lines.append(
            f"  weights:  stable {weights['stable'].get('weight', 0)}%, canary {weights['canary'].get('weight', 0)}%"
        )
    else:
        lines.append("  weights:  (not reported in status.canary.weights)")
    stable, canary = status.get("stableRS"), status.get("currentPodHash")
    lines.append(f"  stable:   {stable or '(none)'}")
    lines.append(f"  canary:   {canary or '(none)'}" + (" (= stable: no canary)" if canary == stable else ""))
    lines.append(
        f"  replicas: spec {spec.get('replicas', '(unset)')}, ready {status.get('readyReplicas', 0)}"
        f"/{status.get('replicas', 0)}, updated {status.get('updatedReplicas', 0)}"
    )
    reasons = [c.get("reason", "?") for c in status.get("pauseConditions") or []]
    lines.append(
        f"  paused:   spec.paused {bool(spec.get('paused'))}"
        + (f", pauseConditions {', '.join(reasons)}" if reasons else "")
        + (", aborted (status.abort)" if status.get("abort") else "")
    )
    return lines
