"""What `kubectl argo rollouts promote|pause|abort|undo` send for a Rollout, reproduced from the
plugin's source (github.com/argoproj/argo-rollouts, pkg/kubectl-argo-rollouts/cmd/<command>/), and
a summary of a Rollout for `status`. Pure functions over the Rollout as the API returns it (a dict).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from serving.runbook.errors import RefusedError, UsageError
from serving.runbook.kube import JSON_PATCH, Patch

HASH_LABEL = "rollouts-pod-template-hash"
REVISION = "rollout.argoproj.io/revision"


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
    spec_patch = Patch("Rollout", name, {"spec": {"paused": False}}) if paused else None
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
    status_patch = Patch("Rollout", name, status_body, "status") if status_body else None
    return StatusFirst(status_patch, spec_patch, Patch("Rollout", name, unified) if status_patch else None)


def abort(name: str) -> StatusFirst:
    """abort.go: status.abort through the status subresource, the same patch on the object on 404."""
    body = {"status": {"abort": True}}
    return StatusFirst(Patch("Rollout", name, body, "status"), None, Patch("Rollout", name, body))


def pause(name: str) -> Patch:
    """pause.go: spec.paused, on the object itself."""
    return Patch("Rollout", name, {"spec": {"paused": True}})


def label_selector(ro: dict[str, Any]) -> str:
    """spec.selector as the string metav1.LabelSelectorAsSelector gives (matchLabels, matchExpressions)."""
    selector = (ro.get("spec") or {}).get("selector") or {}
    terms = [(key, f"{key}={value}") for key, value in (selector.get("matchLabels") or {}).items()]
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], sorted(expression.get("values") or [])
        text = {
            "In": f"{key} in ({','.join(values)})",
            "NotIn": f"{key} notin ({','.join(values)})",
            "Exists": key,
            "DoesNotExist": f"!{key}",
        }[operator]
        terms.append((key, text))
    return ",".join(text for _, text in sorted(terms))


def scale(ro: dict[str, Any], hpas: list[dict[str, Any]], replicas: int) -> tuple[Patch, str]:
    """spec.replicas of the Rollout, unless an HPA scales it: then that HPA's minReplicas (a floor the
    HPA keeps, and maxReplicas too when N is above it), since the HPA would overwrite spec.replicas."""
    name = ro["metadata"]["name"]
    for hpa in hpas:
        target = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        if target.get("kind") == "Rollout" and target.get("name") == name:
            hpa_name, bounds = hpa["metadata"]["name"], hpa["spec"]
            if replicas < 1:
                raise UsageError(f"HorizontalPodAutoscaler {hpa_name} scales Rollout {name}: minReplicas must be >= 1")
            body: dict[str, Any] = {"minReplicas": replicas}
            if replicas > bounds.get("maxReplicas", 0):
                body["maxReplicas"] = replicas
            was = f"minReplicas {bounds.get('minReplicas', 1)}, maxReplicas {bounds.get('maxReplicas')}"
            now = ", ".join(f"{field} {value}" for field, value in body.items())
            why = (
                f"HorizontalPodAutoscaler {hpa_name} owns the replica count of Rollout {name} "
                f"(it would overwrite spec.replicas): setting its {now} (was {was})"
            )
            return Patch("HorizontalPodAutoscaler", hpa_name, {"spec": body}), why
    why = f"no HorizontalPodAutoscaler targets Rollout {name}: setting its spec.replicas {replicas}"
    return Patch("Rollout", name, {"spec": {"replicas": replicas}}), why + f" (was {ro['spec'].get('replicas')})"


def _revision(rs: dict[str, Any]) -> int | None:
    value = ((rs.get("metadata") or {}).get("annotations") or {}).get(REVISION, "0")
    try:
        return int(value)
    except ValueError:
        return None


def _controlled_by(rs: dict[str, Any], ro: dict[str, Any]) -> bool:
    uid = ro["metadata"].get("uid")
    return any(ref.get("controller") and ref.get("uid") == uid for ref in rs["metadata"].get("ownerReferences") or [])


def _without_hash(template: dict[str, Any]) -> dict[str, Any]:
    template = copy.deepcopy(template)
    ((template.get("metadata") or {}).get("labels") or {}).pop(HASH_LABEL, None)
    return template


def _derivative(a: Any, b: Any) -> bool:
    """apimachinery's Semantic.DeepDerivative on JSON values: what `a` leaves empty is not compared."""
    if a in (None, "", {}, []):
        return True
    if isinstance(a, dict):
        return isinstance(b, dict) and all(_derivative(value, b.get(key)) for key, value in a.items())
    if isinstance(a, list):
        return isinstance(b, list) and len(a) <= len(b) and all(map(_derivative, a, b))
    return a == b


def undo(ro: dict[str, Any], replicasets: list[dict[str, Any]], to_revision: int) -> tuple[Patch | None, str]:
    """undo.go: the template of the previous revision (or `to_revision`) back into spec.template as
    a JSON patch; (None, why) when the current template already matches it."""
    name = ro["metadata"]["name"]
    if (ro.get("spec") or {}).get("workloadRef"):
        raise RefusedError(
            f"Rollout {name} takes its template from spec.workloadRef: undo would patch that workload, "
            "which this runbook does not do"
        )
    owned = [(rev, rs) for rs in replicasets if _controlled_by(rs, ro) and (rev := _revision(rs)) is not None]
    if to_revision:
        chosen = next((rs for rev, rs in owned if rev == to_revision), None)
        if chosen is None:
            found = sorted(rev for rev, _ in owned)
            raise RefusedError(
                f"Rollout {name}: unable to find specified revision {to_revision} in history (revisions: {found})"
            )
    else:
        ordered = sorted(owned, key=lambda pair: pair[0], reverse=True)
        if len(ordered) < 2:
            raise RefusedError(f"Rollout {name}: no revision found to roll back to (its ReplicaSets: {len(owned)})")
        chosen = ordered[1][1]
    template = _without_hash(chosen["spec"]["template"])
    revision = _revision(chosen)
    if _derivative(_without_hash(ro["spec"].get("template") or {}), template):
        return None, f"skipped rollback (current template already matches revision {revision})"
    body = [{"op": "replace", "path": "/spec/template", "value": template}]
    return Patch(
        "Rollout", name, body, content_type=JSON_PATCH
    ), f"to revision {revision} ({chosen['metadata']['name']})"


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
