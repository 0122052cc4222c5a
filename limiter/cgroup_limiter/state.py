"""What the agent set, per pod, in a JSON file: a restart picks it up instead of starting over.

Without it a restarted agent would see a throttled pod's io.max, not know it set it, lift it,
and throttle the pod again K intervals later (flapping).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)
VERSION = 1


class StateFileError(ValueError):
    pass


@dataclass
class PodRecord:
    applied: dict[str, str] = field(default_factory=dict)  # file key ("io.max 254:0", "cpu.weight") -> value
    original: dict[str, str] = field(default_factory=dict)  # cpu.* values before we first wrote them
    throttled: list[tuple[str, str]] = field(default_factory=list)  # (device, direction)


@dataclass
class State:
    pods: dict[str, PodRecord] = field(default_factory=dict)
    contended: bool = False  # contention mode: the node was under protected-pod IO pressure


def _record(uid: str, raw: object, path: Path) -> PodRecord:
    if not isinstance(raw, dict):
        raise StateFileError(f"{path}: pods.{uid}: expected a mapping")
    applied, original, throttled = raw.get("applied", {}), raw.get("original", {}), raw.get("throttled", [])
    for key, value in (("applied", applied), ("original", original)):
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise StateFileError(f"{path}: pods.{uid}.{key}: expected a mapping of strings")
    if not isinstance(throttled, list) or not all(isinstance(t, list) and len(t) == 2 for t in throttled):
        raise StateFileError(f"{path}: pods.{uid}.throttled: expected a list of [device, direction]")
    return PodRecord(dict(applied), dict(original), [(str(d), str(k)) for d, k in throttled])


def load_state(path: Path) -> State:
    """The recorded pods; an absent file is an empty state, a broken one a StateFileError."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return State()
    except OSError as error:
        raise StateFileError(f"{path}: cannot read: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise StateFileError(f"{path}: line {error.lineno}: not valid JSON: {error.msg}") from None
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("pods"), dict):
        raise StateFileError(f"{path}: expected {{'version': {VERSION}, 'pods': {{...}}}}")
    contended = data.get("contended", False)
    if not isinstance(contended, bool):
        raise StateFileError(f"{path}: contended: expected true or false")
    return State({uid: _record(uid, raw, path) for uid, raw in data["pods"].items()}, contended)


def save_state(path: Path, state: State) -> None:
    """Atomically (write a sibling, then rename), so a crash never leaves half a file."""
    pods = state.pods
    body = {
        "version": VERSION,
        "contended": state.contended,
        "pods": {
            uid: {"applied": r.applied, "original": r.original, "throttled": [list(t) for t in r.throttled]}
            for uid, r in sorted(pods.items())
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    os.replace(partial, path)
