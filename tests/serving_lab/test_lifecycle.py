"""Up, status and down, from separate processes; failed starts leave nothing behind and say why."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from lab_fleet import serving
from lab_fleet.serving import LIMITER_JOB, SCRAPE_INTERVAL_S, TRITON_JOB, ServingLab
from model_repo_check.tritonserver import server
from model_repo_check.tritonserver.processes import (
    LOOPBACK,
    ServerError,
    command_of,
    free_port,
    group_members,
    spawn,
    stop_group,
    wait_for,
    wait_ready,
)
from tests.ports import taken_port

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


@contextmanager
def limiter_agent(tmp_path: Path) -> Iterator[str]:
    """The cgroup limiter agent (limiter/) on an empty fake cgroup tree, metrics on a free
    loopback port; yields that HOST:PORT."""
    (tmp_path / "cgroup").mkdir()
    (tmp_path / "pods.json").write_text('{"items": []}')
    (tmp_path / "limiter.yml").write_text(f"metrics: {{address: {LOOPBACK}}}\n")
    port = free_port()
    argv = [sys.executable, "-m", "cgroup_limiter", "--config", str(tmp_path / "limiter.yml")]
    argv += ["--cgroup-root", str(tmp_path / "cgroup"), "--pods-file", str(tmp_path / "pods.json")]
    argv += ["--node-name", "serving-lab", "--metrics-port", str(port)]
    proc = spawn(argv, tmp_path / "limiter.log", {**os.environ, "PYTHONPATH": str(REPO / "limiter")})
    try:
        wait_ready(f"http://{LOOPBACK}:{port}/healthz", 30, "the limiter agent", proc, tmp_path / "limiter.log")
        yield f"{LOOPBACK}:{port}"
    finally:
        stop_group(proc.pid)
        proc.wait()


def target_health(prometheus_url: str) -> dict[str, str]:
    with urllib.request.urlopen(f"{prometheus_url}/api/v1/targets?state=active", timeout=5) as response:
        return {t["labels"]["job"]: t["health"] for t in json.load(response)["data"]["activeTargets"]}


def test_up_status_down_in_separate_processes_leave_no_process(tmp_path: Path) -> None:
    run_dir = tmp_path / "lab"
    with limiter_agent(tmp_path) as limiter:
        up = serve_lab("up", "--run-dir", str(run_dir), "--limiter", limiter)
        try:
            assert up.returncode == 0, up.stderr
            for label in ("Triton HTTP", "Triton gRPC", "Triton metrics", "Prometheus", "Alertmanager"):
                assert re.search(rf"^{label} +(http://)?127\.0\.0\.1:\d+", up.stdout, re.M), up.stdout
            pids = lab_processes(run_dir)
            assert len(pids) >= 3 + 3, pids  # three servers and Triton's backend stubs (one per model instance)
            prefix = json.loads((run_dir / "state.json").read_text())["processes"]["tritonserver"]["shm_prefix"]
            assert len(list(server.SHM.glob(f"{prefix}*"))) >= 3, prefix  # one region per stub
            status = serve_lab("status", "--run-dir", str(run_dir))
            assert status.returncode == 0
            assert status.stdout.count("healthy") == 3, status.stdout
            prometheus = json.loads((run_dir / "state.json").read_text())["urls"]["prometheus"]
            wait_for(
                lambda: target_health(prometheus) == {TRITON_JOB: "up", LIMITER_JOB: "up"},
                5 * SCRAPE_INTERVAL_S,
                "Prometheus to scrape Triton and the limiter agent",
            )
        finally:
            down = serve_lab("down", "--run-dir", str(run_dir))
    assert down.returncode == 0, down.stderr
    assert [pid for pid in pids if command_of(pid)] == []  # gone, or a zombie without a command line
    assert list(server.SHM.glob(f"{prefix}*")) == []  # the stubs' shared memory too
    assert not (run_dir / "state.json").exists()
    assert serve_lab("status", "--run-dir", str(run_dir)).stdout.startswith("not running")
    assert serve_lab("down", "--run-dir", str(run_dir)).returncode == 0  # again: nothing to do


def test_a_killed_tritonservers_shared_memory_is_removed_by_its_stop(tmp_path: Path) -> None:
    """SIGKILL leaves the stubs' /dev/shm regions behind (so did a plain stop, 8 of 20); stop()
    removes those under the server's own prefix and no other."""
    models = tmp_path / "models"
    shutil.copytree(REPO / "model_repository/text-classifier", models / "text-classifier")
    other = server.SHM / "triton_lab_not_this_servers_region"
    other.write_bytes(b"")
    triton = server.TritonProcess(models, tmp_path / "triton")
    try:
        triton.start()
        regions = list(server.SHM.glob(f"{triton.shm_prefix}*"))
        assert regions, f"no /dev/shm region named {triton.shm_prefix}*: the prefix did not reach the backend"
        assert triton.pid is not None
        stop_group(triton.pid, timeout=0)  # SIGTERM and SIGKILL at once: no stub cleans up
        assert [region for region in regions if region.exists()], "nothing left behind to remove"
    finally:
        triton.stop()
    assert list(server.SHM.glob(f"{triton.shm_prefix}*")) == []
    assert other.exists()
    other.unlink()


def test_a_broken_model_repository_fails_up_with_tritons_reason_and_stops_alertmanager(tmp_path: Path) -> None:
    models = tmp_path / "models"
    shutil.copytree(REPO / "model_repository/text-classifier", models / "text-classifier")
    config = models / "text-classifier/config.pbtxt"
    # A preferred batch size above max_batch_size, whatever the committed batching block holds.
    # The whole block, up to its closing brace at the start of a line (the queue policy nests).
    broken, count = re.subn(
        r"^dynamic_batching \{.*?^\}",
        "dynamic_batching { preferred_batch_size: [4, 4096] }",
        config.read_text(),
        flags=re.MULTILINE | re.DOTALL,
    )
    assert count == 1, f"{config} has no dynamic_batching block to break"
    config.write_text(broken)
    lab = ServingLab(tmp_path / "lab", model_repository=models)
    try:
        with pytest.raises(ServerError, match=r"tritonserver exited with status \d+") as caught:
            lab.up(timeout=60)
        assert "preferred" in str(caught.value)  # Triton's own reason, from its log
        assert lab.state() == {}
        assert started_pids(tmp_path / "lab") == []
    finally:
        lab.down()  # has work to do only when `up` wrongly succeeded or left a process


def test_ports_taken_before_the_servers_bind_them_are_retried_on_new_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """free_port() found a port free, another process took it before the server bound it: Triton
    (its metrics port: it would serve on without metrics) and Prometheus say so in their logs,
    and `up` starts each again on new ports."""
    with taken_port() as taken:
        ours = iter([free_port(), taken])  # Alertmanager's, then Prometheus' first
        monkeypatch.setattr(serving, "free_port", lambda: next(ours, None) or free_port())
        triton = iter([free_port(), free_port(), taken])  # http, grpc, then metrics of the first start
        monkeypatch.setattr(server, "free_port", lambda: next(triton, None) or free_port())
        lab = ServingLab(tmp_path / "lab")
        try:
            lab.up(timeout=60)
            assert lab.state()["start_attempts"] == {"alertmanager": 1, "tritonserver": 2, "prometheus": 2}
            assert taken not in (lab.triton.ports["metrics"], int(lab.prometheus_url.rsplit(":", 1)[1]))
            assert all(entry["healthy"] for entry in lab.status().values()), lab.status()
        finally:
            lab.down()
    assert started_pids(tmp_path / "lab") == []


def test_a_port_taken_at_every_attempt_fails_up_naming_prometheus_and_stops_what_had_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with taken_port() as taken:
        ports = iter([free_port(), *[taken] * serving.PORT_ATTEMPTS])  # Alertmanager's, then Prometheus' every time
        monkeypatch.setattr(serving, "free_port", lambda: next(ports))
        lab = ServingLab(tmp_path / "lab")
        try:
            with pytest.raises(ServerError, match="prometheus") as caught:
                lab.up(timeout=60)
            assert "address already in use" in str(caught.value)
            assert next(ports, None) is None  # every attempt was made
            assert lab.state() == {}
            assert started_pids(tmp_path / "lab") == []
        finally:
            lab.down()  # has work to do only when `up` wrongly succeeded or left a process
