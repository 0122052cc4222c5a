"""The serving lab's process handling and generated Prometheus config, without starting a server."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lab_fleet.serving import LIMITER_JOB, SCRAPE_INTERVAL_S, TRITON_JOB, prometheus_config
from model_repo_check.tritonserver import server
from model_repo_check.tritonserver.processes import (
    ServerError,
    command_of,
    free_port,
    group_members,
    spawn,
    stop_group,
    wait_ready,
)
from model_repo_check.tritonserver.server import TritonNotInstalledError, TritonProcess

# A parent that starts a child which ignores SIGTERM, both in the parent's process group.
STUBBORN_FAMILY = (
    "import signal, subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    'print("child", flush=True); time.sleep(600)\'])\n'
    "time.sleep(600)\n"
)


def test_stop_group_ends_the_children_too_even_one_that_ignores_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "family.log"
    parent = spawn([sys.executable, "-c", STUBBORN_FAMILY], log)
    deadline = time.monotonic() + 30
    while len(group_members(parent.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(group_members(parent.pid)) == 2
    stop_group(parent.pid, timeout=1)
    parent.wait()
    assert group_members(parent.pid) == []
    stop_group(parent.pid)  # again: nothing left, no error


def test_a_zombie_counts_as_gone(tmp_path: Path) -> None:
    proc = spawn([sys.executable, "-c", "pass"], tmp_path / "quick.log")
    deadline = time.monotonic() + 30
    while group_members(proc.pid) and time.monotonic() < deadline:  # exits, not reaped yet
        time.sleep(0.05)
    assert group_members(proc.pid) == []
    proc.wait()


def test_a_server_that_exits_early_is_reported_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    proc = spawn([sys.executable, "-c", "import sys; print('E1203 bad flag --x'); print('bye'); sys.exit(3)"], log)
    with pytest.raises(ServerError, match=r"(?s)demo exited with status 3 before .*E1203 bad flag --x.*bye"):
        wait_ready(f"http://127.0.0.1:{free_port()}/ready", 30, "demo", proc, log)


def test_the_prometheus_config_scrapes_triton_and_the_limiter_when_given(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    config = prometheus_config("127.0.0.1:8002", "127.0.0.1:9093", rules, "127.0.0.1:9500")
    assert config["global"]["scrape_interval"] == config["global"]["evaluation_interval"] == f"{SCRAPE_INTERVAL_S}s"
    jobs = {job["job_name"]: job["static_configs"][0]["targets"] for job in config["scrape_configs"]}
    assert jobs == {TRITON_JOB: ["127.0.0.1:8002"], LIMITER_JOB: ["127.0.0.1:9500"]}
    assert config["rule_files"] == [str(rules)]
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["127.0.0.1:9093"]
    without = prometheus_config("127.0.0.1:8002", "127.0.0.1:9093", rules, None)
    assert [job["job_name"] for job in without["scrape_configs"]] == [TRITON_JOB]
    yaml.safe_dump(config)  # plain data


def test_a_missing_triton_venv_names_the_make_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "TRITON_VENV", tmp_path / ".venv-triton")
    with pytest.raises(TritonNotInstalledError, match=r"run `make \.venv-triton/\.stamp`"):
        TritonProcess(tmp_path / "models", tmp_path / "run").start()
    with pytest.raises(TritonNotInstalledError, match=r"make \.venv-triton/\.stamp"):
        server.perf_analyzer("--help")


def test_urls_before_start_say_so(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="start"):
        _ = TritonProcess(tmp_path / "models", tmp_path / "run").http_url


def test_spawn_runs_in_its_own_session(tmp_path: Path) -> None:
    proc = spawn(
        [sys.executable, "-c", "import os, time; print(os.getsid(0), os.getpgid(0)); time.sleep(30)"],
        tmp_path / "s.log",
    )
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "s.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "s.log").read_text().split() == [str(proc.pid), str(proc.pid)]
    finally:
        stop_group(proc.pid)
        proc.wait()


# A starter that spawns a sleeper, prints its pid and then waits to be killed.
STARTER = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from model_repo_check.tritonserver.processes import spawn\n"
    "child = spawn(['sleep', '600'], Path(sys.argv[1]), outlive_caller=sys.argv[2] == 'outlive')\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(600)\n"
)


@pytest.mark.parametrize("outlive", [False, True], ids=["tied", "outlive"])
def test_a_server_dies_with_a_starter_killed_before_its_teardown_unless_it_is_meant_to_outlive_it(
    tmp_path: Path, outlive: bool
) -> None:
    argv = [sys.executable, "-c", STARTER, str(tmp_path / "sleep.log"), "outlive" if outlive else "tied"]
    starter = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    assert starter.stdout is not None
    child = int(starter.stdout.readline())
    try:
        assert group_members(child) == [child]
        # The death signal holds from setpriv's prctl on, just before it execs the server: wait
        # for the exec (a starter killed in the instant between fork and prctl leaves an orphan;
        # on a loaded machine this test once killed it there).
        deadline = time.monotonic() + 10
        while command_of(child)[:1] != ["sleep"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert command_of(child)[:1] == ["sleep"], command_of(child)
        starter.kill()  # SIGKILL: no finally, no teardown
        starter.wait()
        deadline = time.monotonic() + 10
        while group_members(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert bool(group_members(child)) is outlive
    finally:
        stop_group(child)
