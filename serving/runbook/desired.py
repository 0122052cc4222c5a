"""The runbook's desired-state changes, each a checked edit of one key of pulumi/Pulumi.<env>.yaml
followed by the render (checkout.commit_ready):

  scale            gpu-serving:<triton|gateway>.replicas.{min,max}: the HPA's bounds
  triton_release   gpu-serving:triton.release: a Triton release of the platform matrix
  model_rollback   gpu-serving:modelRelease: the previous reference in the stack file's git history,
                   or a named published release

The render validates the result as `make render` does (bounds, the matrix and the fleet); the
publication index (model_releases/) decides whether a model release may be referenced.
"""

from __future__ import annotations

from typing import Any

import yaml

from serving.release.index import INDEX_DIR, RecordError, load_record, record_path
from serving.release.stack import KEY as MODEL_RELEASE_KEY
from serving.release.stack import (
    Reference,
    StackError,
    edited_text,
    parse_reference,
    release_uri,
    removed_text,
    store_of,
)
from serving.release.verify import check_stack
from serving.runbook.checkout import Checkout, commit_ready
from serving.runbook.errors import RefusedError
from serving.runbook.stack_edit import StackEditError, set_value

WORKLOAD_KEYS = {"triton": "gpu-serving:triton", "gateway": "gpu-serving:gateway"}
TRITON_KEY = WORKLOAD_KEYS["triton"]


def _current(checkout: Checkout, text: str, key: str, field: str) -> Any:
    """config[key][field] of the stack file's text, None where it has none (the edit says why)."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise RefusedError(f"{checkout.stack_rel}: not valid YAML: {err}") from None
    node: Any = document
    for name in ("config", key, field):
        node = node.get(name) if isinstance(node, dict) else None
    return node


def _flow(mapping: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{key}: {value}" for key, value in mapping.items()) + "}"


def scale(checkout: Checkout, workload: str, minimum: int | None, maximum: int | None) -> None:
    """The workload's HPA bounds; the one not given stays as the stack file has it."""
    key = WORKLOAD_KEYS[workload]
    text = checkout.stack.read_text(encoding="utf-8")
    was = _current(checkout, text, key, "replicas")
    now = dict(was) if isinstance(was, dict) else {}
    try:
        for field, value in (("min", minimum), ("max", maximum)):
            if value is not None:
                text = set_value(checkout.stack_rel, text, (key, "replicas", field), value)
                now[field] = value
    except StackEditError as err:
        raise RefusedError(str(err)) from None
    was_text = _flow(was) if isinstance(was, dict) else repr(was)
    commit_ready(checkout, text, f"{checkout.env}: {workload} replicas {_flow(now)} (was {was_text})")


def triton_release(checkout: Checkout, release: str) -> None:
    """gpu-serving:triton.release: a new Triton image, canaried by the Rollout like a model release."""
    text = checkout.stack.read_text(encoding="utf-8")
    was = _current(checkout, text, TRITON_KEY, "release")
    try:
        new = set_value(checkout.stack_rel, text, (TRITON_KEY, "release"), release)
    except StackEditError as err:
        raise RefusedError(str(err)) from None
    before = f"was {was}" if was else "was the fleet inventory default"
    commit_ready(checkout, new, f"{checkout.env}: Triton release {release} ({before})")


def _describe(reference: Reference | None) -> str:
    return reference.digest if reference else f"no model release ({TRITON_KEY}.modelRepository)"


def _previous(checkout: Checkout, current: Reference | None) -> tuple[Reference | None, str]:
    """The release deployed before `current`, as the stack file's git history tells it (oldest
    first): a value equal to the one before the last is a rollback and takes the last off, so
    after A, B, C and a rollback to B, the release before B is A, not C."""
    lineage: list[tuple[Reference | None, str]] = []
    for commit, subject in reversed(checkout.log(checkout.stack_rel)):
        text = checkout.show(commit, checkout.stack_rel)
        if text is not None:
            reference = parse_reference(f"{checkout.stack_rel} at {commit[:12]}", text)
            _deployed(lineage, reference, f"commit {commit[:12]} ({subject})")
    _deployed(lineage, current, "the working tree")
    if len(lineage) < 2:
        raise RefusedError(
            f"{checkout.stack_rel}: {MODEL_RELEASE_KEY}: nothing to roll back to: the file's git history holds no "
            f"release before the current one, {_describe(current)}; name a published release with --to sha256:<hex>"
        )
    return lineage[-2]


def _deployed(lineage: list[tuple[Reference | None, str]], reference: Reference | None, origin: str) -> None:
    """`reference` deployed after those of `lineage`: the same as the last changes nothing, the one
    before the last is a rollback (the last is taken off), anything else is a new release."""
    if lineage and lineage[-1][0] == reference:
        return
    if len(lineage) >= 2 and lineage[-2][0] == reference:
        lineage.pop()
        return
    lineage.append((reference, origin))


def _published(checkout: Checkout, digest: str) -> Reference:
    """The reference to `digest` in this environment's store, from its publication record."""
    record = record_path(checkout.root / INDEX_DIR.name, digest)
    if not record.exists():
        raise RefusedError(
            f"{checkout.stack_rel}: {MODEL_RELEASE_KEY}: {digest} was never published: no publication record "
            f"{record.relative_to(checkout.root)}; publish it with scripts/release_model publish --env {checkout.env}"
        )
    size = load_record(record).size_bytes
    return Reference(release_uri(store_of(checkout.stack), digest), digest, size)


def model_rollback(checkout: Checkout, to: str | None) -> None:
    """gpu-serving:modelRelease back to the previous reference (or to `to`): a published release,
    or none (Triton reads triton.modelRepository) where that is what the history had before."""
    index = checkout.root / INDEX_DIR.name
    text = checkout.stack.read_text(encoding="utf-8")
    try:
        current = parse_reference(checkout.stack_rel, text)
        target, origin = (_published(checkout, to), f"--to {to}") if to else _previous(checkout, current)
        new = edited_text(checkout.stack, text, target) if target else removed_text(checkout.stack, text)
    except (StackError, RecordError) as err:
        raise RefusedError(str(err)) from None
    print(f"{checkout.stack_rel}: {MODEL_RELEASE_KEY}: {_describe(current)} -> {_describe(target)} (from {origin})")

    def published() -> list[str]:
        problems, _ = check_stack(checkout.stack, index)
        hint = f"publish it with scripts/release_model publish --env {checkout.env}"
        return [*problems, hint] if problems else []

    record = [str(record_path(index, target.digest).relative_to(checkout.root))] if target else []
    message = f"{checkout.env}: model release back to {_describe(target)} (was {_describe(current)})"
    commit_ready(checkout, new, message, published, tuple(record))
