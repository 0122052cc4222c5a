"""Run the compliance suite against an inventory and write the report.

    python -m tests.compliance.run --inventory inventories/lab [--hosts ansible://gpu_nodes] [--report-dir reports]

Runs pytest on tests/compliance with testinfra's --hosts and --ansible-inventory, which writes
<report-dir>/compliance.json and compliance.md and prints one line per node and check. Exits
non-zero when any check failed or errored, or when pytest itself failed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pytest

from tests.compliance import report

SUITE = Path(__file__).resolve().parent
REPO = SUITE.parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.compliance.run", description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", required=True, help="inventory folder or file (inventories/<env>)")
    parser.add_argument("--hosts", default="ansible://gpu_nodes", help="testinfra hosts (ansible://gpu_nodes)")
    parser.add_argument("--report-dir", type=Path, default=Path("reports"), help="where the reports go (reports)")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    if not Path(args.inventory).exists():
        parser.error(f"--inventory {args.inventory}: no such file or folder")
    os.environ.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))
    # testinfra's ansible backend runs ansible-inventory: the one beside this interpreter.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    json_path = args.report_dir / report.JSON_NAME
    json_path.unlink(missing_ok=True)
    code = pytest.main(
        [
            str(SUITE),
            f"--hosts={args.hosts}",
            f"--ansible-inventory={args.inventory}",
            f"--compliance-report-dir={args.report_dir}",
            "-q",
            "-p",
            "no:cacheprovider",
            *args.pytest_args,
        ]
    )
    if not json_path.exists():
        print(f"compliance: no report was written (pytest exit {int(code)})", file=sys.stderr)
        return int(code) or 2
    counts = report.totals(report.load(json_path))
    return 1 if counts["fail"] or counts["error"] or code != pytest.ExitCode.OK else 0


if __name__ == "__main__":
    sys.exit(main())
