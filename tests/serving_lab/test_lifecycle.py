"""Up, status and down, from separate processes; failed starts leave nothing behind and say why."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from lab_fleet import serving
from lab_fleet.processes import LOOPBACK, ServerError, free_port, group_members
from lab_fleet.serving import ServingLab

pytestmark = pytest.mark.serving_lab

REPO = Path(__file__).resolve().parents[2]
SERVE_LAB = [sys.executable, str(REPO / "scripts/serve-lab")]


def serve_lab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SERVE_LAB, *args], capture_output=True, text=True, timeout=180, check=False)


def lab_processes(run_dir: Path) -> list[int]:
    """Every live process of a process group that a lab under run_dir started (the state file's pids)."""
    state = json.loads((run_dir / "state.json").read_text())
    return [pid for entry in state["processes"].values() for pid in group_members(entry["pid"])]


def started_pids(run_dir: Path) -> list[int]:
    """Live processes whose command line names run_dir: each server gets its config, data or
    backend paths from it (zombies have no command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(run_dir) in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_up_status_down_in_separate_processes_leave_no_process(tmp_path: Path) -> None:
    run_dir = tmp_path / "lab"
    up = serve_lab("up", "--run-dir", str(run_dir))
    try:
        assert up.returncode == 0, up.stderr
        for label in ("Triton HTTP", "Triton gRPC", "Triton metrics", "Prometheus", "Alertmanager"):
            assert re.search(rf"^{label} +(http://)?127\.0\.0\.1:\d+", up.stdout, re.M), up.stdout
        pids = lab_processes(run_dir)
        assert len(pids) >= 3 + 3, pids  # three servers and Triton's backend stubs (one per model instance)
        status = serve_lab("status", "--run-dir", str(run_dir))
        assert status.returncode == 0
        assert status.stdout.count("healthy") == 3, status.stdout
    finally:
        down = serve_lab("down", "--run-dir", str(run_dir))
    assert down.returncode == 0, down.stderr
    assert [pid for pid in pids if Path(f"/proc/{pid}").exists() and group_members(pid)] == []
    assert not (run_dir / "state.json").exists()
    assert serve_lab("status", "--run-dir", str(run_dir)).stdout.startswith("not running")
    assert serve_lab("down", "--run-dir", str(run_dir)).returncode == 0  # again: nothing to do


def test_a_broken_model_repository_fails_up_with_tritons_reason_and_stops_alertmanager(tmp_path: Path) -> None:
    models = tmp_path / "models"
    shutil.copytree(REPO / "model_repository/text-classifier", models / "text-classifier")
    config = models / "text-classifier/config.pbtxt"
    config.write_text(config.read_text().replace("preferred_batch_size: [4, 8]", "preferred_batch_size: [4, 32]"))
    lab = ServingLab(tmp_path / "lab", model_repository=models)
    with pytest.raises(ServerError, match=r"tritonserver exited with status \d+") as caught:
        lab.up(timeout=60)
    assert "preferred" in str(caught.value)  # Triton's own reason, from its log
    assert lab.state() == {}
    assert started_pids(tmp_path / "lab") == []


def test_a_taken_port_fails_up_naming_prometheus_and_stops_what_had_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind((LOOPBACK, 0))
        taken.listen()
        ports = iter([free_port(), taken.getsockname()[1]])  # Alertmanager's, then Prometheus'
        monkeypatch.setattr(serving, "free_port", lambda: next(ports))
        lab = ServingLab(tmp_path / "lab")
        with pytest.raises(ServerError, match="prometheus") as caught:
            lab.up(timeout=60)
    assert "address already in use" in str(caught.value)
    assert lab.state() == {}
    assert started_pids(tmp_path / "lab") == []
