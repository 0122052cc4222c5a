"""Reference windows: `<repository>/<model>/drift_reference.csv`, shipped with the model release.

The header names the drift features (the gateway mapping's `drift_features`, in its order);
every other line is one sampled request: a finite number per column. Every problem raises
ReferenceError naming the file, and the line and column where there is one.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

REFERENCE_FILE = "drift_reference.csv"


class ReferenceError(ValueError):
    pass


@dataclass(frozen=True)
class Reference:
    model: str
    path: Path
    names: tuple[str, ...]
    rows: tuple[tuple[float, ...], ...]


def _number(text: str, path: Path, line: int, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ReferenceError(f"{path}:{line}: column {column!r}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ReferenceError(f"{path}:{line}: column {column!r}: {text!r} is not finite")
    return value


def load_reference(path: Path) -> Reference:
    """One model's reference window; the model is the name of the file's folder."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            lines = list(csv.reader(handle))
    except OSError as err:
        raise ReferenceError(f"{path}: cannot read: {err.strerror}") from None
    if not lines or not lines[0]:
        raise ReferenceError(f"{path}:1: no header (the drift feature names)")
    names = tuple(name.strip() for name in lines[0])
    if any(not name for name in names):
        raise ReferenceError(f"{path}:1: an empty column name in the header")
    if len(set(names)) != len(names):
        twice = sorted({name for name in names if names.count(name) > 1})
        raise ReferenceError(f"{path}:1: columns named twice: {', '.join(twice)}")
    rows = []
    for line, cells in enumerate(lines[1:], start=2):
        if len(cells) != len(names):
            raise ReferenceError(f"{path}:{line}: {len(cells)} values, the header names {len(names)} columns")
        rows.append(tuple(_number(text, path, line, name) for text, name in zip(cells, names, strict=True)))
    if not rows:
        raise ReferenceError(f"{path}: no rows below the header")
    return Reference(path.parent.name, path, names, tuple(rows))


def load_references(repository: Path) -> dict[str, Reference]:
    """Every `<repository>/<model>/drift_reference.csv`; a repository without any is an error."""
    paths = sorted(repository.glob(f"*/{REFERENCE_FILE}"))
    if not paths:
        raise ReferenceError(f"{repository}: no model folder has a {REFERENCE_FILE}")
    return {path.parent.name: load_reference(path) for path in paths}
