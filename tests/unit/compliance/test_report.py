"""The report writer, and the runner end to end against this machine (local://), which is no GPU node."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.compliance import report
from tests.compliance.report import Row

REPO = Path(__file__).resolve().parents[3]
META = {"inventory": "inventories/lab", "hosts": "ansible://gpu_nodes", "generated": "2026-12-02T12:00:00+00:00"}
ROWS = [
    Row("node-b", "driver_held", "fail", "not hold: nvidia-smi (install)"),
    Row("node-a", "gpu.count", "skip", "no GPU on this node"),
    Row("node-a", "apt_pin", "pass", "pins 1|2\nsecond line"),
]


def test_json_and_markdown_have_one_row_per_node_and_check(tmp_path):
    json_path, md_path = report.write(ROWS, tmp_path / "reports", META)
    document = json.loads(json_path.read_text())
    assert document["totals"] == {"pass": 1, "fail": 1, "skip": 1, "error": 0}
    assert [(r["node"], r["check"]) for r in document["results"]] == [
        ("node-a", "apt_pin"),
        ("node-a", "gpu.count"),
        ("node-b", "driver_held"),
    ]
    assert report.load(json_path) == sorted(ROWS, key=lambda r: (r.node, r.check))
    table = md_path.read_text().splitlines()
    assert "| node-a | apt_pin | pass | pins 1\\|2 second line |" in table
    assert "| node-b | driver_held | fail | not hold: nvidia-smi (install) |" in table
    assert "Totals: 1 pass, 1 fail, 1 skip, 0 error" in table


def test_the_summary_has_a_line_per_row_and_the_totals():
    lines = report.summary_lines(ROWS)
    assert len(lines) == len(ROWS) + 1
    assert lines[0].split() == ["node-a", "apt_pin", "PASS", "pins", "1|2", "second", "line"]
    assert lines[-1] == "2 node(s): 1 pass, 1 fail, 1 skip, 0 error"


def test_the_runner_reports_this_machine_and_exits_non_zero(tmp_path):
    """This machine is no provisioned node: the driver and containerd checks fail, the GPU ones skip, exit 1."""
    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "group_vars/gpu_nodes.yml").write_text(
        (REPO / "inventories/lab/group_vars/gpu_nodes/fleet.yml").read_text()
    )
    name = socket.gethostname()
    (inventory / "hosts.yml").write_text(f"all:\n  children:\n    gpu_nodes:\n      hosts:\n        {name}:\n")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.compliance.run",
            "--inventory",
            str(inventory),
            "--hosts",
            "local://",
            "--report-dir",
            str(tmp_path / "reports"),
            "--",
            f"--compliance-node={name}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {row.check: row for row in report.load(tmp_path / "reports" / report.JSON_NAME)}
    assert {row.node for row in rows.values()} == {name}
    if not Path("/var/lib/dpkg/info/nvidia-smi.list").exists():
        assert (
            rows["driver_packages"].status == "fail"
            and "nvidia-smi is not installed" in rows["driver_packages"].message
        )
    assert rows["gpu.count"].status == "skip" and "NVML is unavailable" in rows["gpu.count"].message
    for check in ("xid", "pcie_link", "nvlink", "ecc_errors", "clocks_event_reasons", "fabric", "dcgm_diag"):
        assert rows[f"gpu.{check}"].status == "skip" and "NVML is unavailable" in rows[f"gpu.{check}"].message
    assert rows["kernel_module"].status == "skip"
    assert f"{len(rows)} pass" not in done.stdout and "node(s):" in done.stdout
    assert (tmp_path / "reports" / report.MARKDOWN_NAME).exists()
