"""The compliance report: one row per node and check, as JSON and as a Markdown table, plus the terminal summary."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

STATUSES = ("pass", "fail", "skip", "error")
JSON_NAME = "compliance.json"
MARKDOWN_NAME = "compliance.md"


@dataclass(frozen=True)
class Row:
    node: str
    check: str
    status: str
    message: str


def totals(rows: Iterable[Row]) -> dict[str, int]:
    counted = Counter(row.status for row in rows)
    return {status: counted.get(status, 0) for status in STATUSES}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(rows: list[Row], meta: Mapping[str, Any]) -> str:
    counts = totals(rows)
    lines = [
        "# Node compliance",
        "",
        f"Inventory `{meta['inventory']}`, hosts `{meta['hosts']}`, {meta['generated']}.",
        "",
        "Totals: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES),
        "",
        "| node | check | status | reason |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {_cell(r.node)} | {_cell(r.check)} | {r.status} | {_cell(r.message)} |" for r in rows]
    return "\n".join(lines) + "\n"


def write(rows: list[Row], directory: Path, meta: Mapping[str, Any]) -> tuple[Path, Path]:
    """Write compliance.json and compliance.md into `directory` (created if needed)."""
    directory.mkdir(parents=True, exist_ok=True)
    ordered = sorted(rows, key=lambda r: (r.node, r.check))
    document = {**meta, "totals": totals(ordered), "results": [asdict(row) for row in ordered]}
    json_path, md_path = directory / JSON_NAME, directory / MARKDOWN_NAME
    json_path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(markdown(ordered, meta), encoding="utf-8")
    return json_path, md_path


def load(path: Path) -> list[Row]:
    """The rows of a compliance.json, for the runner and the lab tests."""
    document = json.loads(path.read_text(encoding="utf-8"))
    return [Row(**row) for row in document["results"]]


def summary_lines(rows: list[Row]) -> list[str]:
    """One line per node and check, then the totals."""
    ordered = sorted(rows, key=lambda r: (r.node, r.check))
    node_w = max((len(r.node) for r in ordered), default=4)
    check_w = max((len(r.check) for r in ordered), default=5)
    lines = []
    for row in ordered:
        lines.append(f"{row.node:<{node_w}}  {row.check:<{check_w}}  {row.status.upper():<5}  {row.message}")
    counts = totals(ordered)
    lines.append(f"{len({r.node for r in ordered})} node(s): " + ", ".join(f"{counts[s]} {s}" for s in STATUSES))
    return lines
