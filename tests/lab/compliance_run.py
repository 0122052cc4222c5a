"""Run the compliance suite against the lab node through its runner, as `make compliance` does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.compliance import report
from tests.lab.conftest import REPO, LabNode


def compliance(lab_node: LabNode, report_dir: Path) -> tuple[int, dict[str, report.Row]]:
    """Run the suite through its runner; the exit code and the report's rows by check name."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.compliance.run",
            "--inventory",
            str(lab_node.inventory.parent),
            "--report-dir",
            str(report_dir),
        ],
        cwd=REPO,
        env=lab_node.env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    rows = report.load(report_dir / report.JSON_NAME)
    assert {row.node for row in rows} == {lab_node.name}, done.stdout[-3000:]
    return done.returncode, {row.check: row for row in rows}


def assert_clean(lab_node: LabNode, report_dir: Path) -> None:
    code, rows = compliance(lab_node, report_dir)
    bad = {check: (row.status, row.message) for check, row in rows.items() if row.status not in ("pass", "skip")}
    assert code == 0 and not bad, bad
