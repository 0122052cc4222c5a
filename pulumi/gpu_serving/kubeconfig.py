"""The kubeconfig a stack's Kubernetes provider reads, checked before `pulumi up` creates anything.

The files are the provider's: the stack's `kubernetes.kubeconfig`, else $KUBECONFIG (a list of
files, merged as kubectl merges them: the first file that names a context wins), else
~/.kube/config. The check reads contexts only; it never talks to a cluster.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

DEFAULT = Path("~/.kube/config")


class KubeconfigError(ValueError):
    """The context cannot be used; `field` is the `kubernetes.` field of the stack config at fault."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(reason)


def files(configured: Path | None, environ: Mapping[str, str]) -> tuple[Path, ...]:
    """The kubeconfig files the provider reads, in kubectl's order of precedence."""
    if configured is not None:
        return (configured,)
    listed = [Path(entry).expanduser() for entry in environ.get("KUBECONFIG", "").split(os.pathsep) if entry]
    return tuple(listed) or (DEFAULT.expanduser(),)


def _contexts_of(path: Path) -> dict[str, str]:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise KubeconfigError("context", f"cannot read the kubeconfig {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise KubeconfigError("context", f"{path} is not valid YAML: {exc}") from exc
    entries = document.get("contexts") if isinstance(document, dict) else None
    contexts: dict[str, str] = {}
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            context = entry.get("context")
            contexts[entry["name"]] = context.get("cluster", "") if isinstance(context, dict) else ""
    return contexts


def contexts(paths: Sequence[Path]) -> dict[str, str]:
    """Context name -> the name of the cluster it points at, over the files that exist (kubectl
    skips a missing one); refused when none does."""
    present = [path for path in paths if path.is_file()]
    if not present:
        shown = os.pathsep.join(map(str, paths))
        raise KubeconfigError("context", f"there is no kubeconfig at {shown}")
    merged: dict[str, str] = {}
    for path in present:
        for name, cluster in _contexts_of(path).items():
            merged.setdefault(name, cluster)
    return merged


def check(context: str, cluster: str, paths: Sequence[Path]) -> None:
    """Refuse unless the kubeconfig has `context` and it points at the cluster named `cluster`."""
    known = contexts(paths)
    shown = os.pathsep.join(map(str, paths))
    if context not in known:
        listed = ", ".join(sorted(known)) or "none"
        raise KubeconfigError(
            "context", f"{context!r} is not a context of the kubeconfig {shown} (its contexts: {listed})"
        )
    if known[context] != cluster:
        raise KubeconfigError(
            "cluster", f"the context {context!r} of {shown} points at the cluster {known[context]!r}, not {cluster!r}"
        )
