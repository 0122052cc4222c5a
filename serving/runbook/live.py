"""The live actions' notices: what each one changed outside git, and what undoes it. Each command
prints its notice after it acts, and its --help starts with it (the names then stay generic).

None of them is a desired-state change: git does not hold what they set, and Argo CD neither
keeps nor reverts it (a Rollout's status is not synced; the rendered Rollout sets no
spec.paused; Triton's loaded models are no Kubernetes object at all).
"""

from __future__ import annotations

RETRY = "kubectl argo rollouts retry rollout"
REVERT = "revert the release in git (scripts/runbook desired model-rollback, or desired triton-release)"

_NOTICES = {
    "promote": (
        "{rollout} moved past its pause or analysis step; undone by nothing that steps back: "
        "`scripts/runbook abort` sends all traffic to stable"
    ),
    "pause": "spec.paused on {rollout}, its canary holds the current step; undone by `scripts/runbook promote`",
    "abort": (
        "status.abort on {rollout}, all traffic on stable while its template stays the new release; undone by "
        "`" + RETRY + " {name} -n {namespace}` (the canary again); to stay on stable, " + REVERT
    ),
    "load": (
        "model {model} loaded on the Triton at {url} only (one pod); undone by `scripts/runbook model unload {model}`"
    ),
    "unload": (
        "model {model} unloaded on the Triton at {url} only (one pod); undone by `scripts/runbook model load {model}`, "
        "or by the pod's restart (it loads every model of its repository)"
    ),
    "reload": (
        "model {model} loaded again on the Triton at {url} only (one pod), from what its repository holds now; "
        "a restart of the pod loads the same, so there is nothing to undo"
    ),
}

# The generic names of --help.
HELP_NAMES = {
    "rollout": "the Rollout",
    "name": "<rollout>",
    "namespace": "<namespace>",
    "model": "NAME",
    "url": "--triton-url",
}


def notice(action: str, **names: str) -> str:
    """`live action: ...` for a Rollout action (names: rollout, name, namespace) or a model action
    (names: model, url)."""
    return "live action: " + _NOTICES[action].format(**{**HELP_NAMES, **names})


def rollout_names(namespace: str, name: str) -> dict[str, str]:
    return {"rollout": f"Rollout {namespace}/{name}", "name": name, "namespace": namespace}
