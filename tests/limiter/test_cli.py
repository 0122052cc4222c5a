"""`python -m cgroup_limiter` as the DaemonSet runs it: /metrics, /healthz, SIGTERM keep or remove;
a heavy writer throttled while the protected pod is under IO pressure."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import yaml
from cgroup_limiter.metrics import serve

from tests.limiter.conftest import DISK, LIMITER, MB, FakeNode

UID = "6e0d2a51-0000-4000-8000-000000000001"
TRITON = "6e0d2a51-0000-4000-8000-000000000002"
CEILING_LINE = f"{DISK} rbps=max wbps=50000000 riops=max wiops=max"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def start(node: FakeNode, on_exit: str, interval: float = 0.2) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    config = {
        "interval_seconds": interval,
        "sysfs_root": str(node.sysfs),
        "state_file": str(node.base / "state.json"),
        "node_pressure_file": str(node.node_pressure),
        "metrics": {"address": "127.0.0.1", "port": port},
        "protect": [{"labels": {"app.kubernetes.io/name": "triton"}}],
        "adaptive": {"mode": "contention", "ceiling_bps": "50M", "trigger_intervals": 1},
    }
    (node.base / "config.yaml").write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "cgroup_limiter", "--config", str(node.base / "config.yaml")]
    command += ["--cgroup-root", str(node.root), "--pods-file", str(node.pods_file), "--on-exit", on_exit]
    env = {**os.environ, "PYTHONPATH": str(LIMITER), "NODE_NAME": "node-a"}
    agent = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for _ in range(100):
        try:
            if get(port, "/healthz")[0] == 200:
                return agent, port
        except OSError:
            pass
        time.sleep(0.05)
    agent.kill()
    pytest.fail(f"the agent did not become healthy:\n{agent.communicate()[0]}")


def burst_until_throttled(node: FakeNode, path) -> None:
    for _ in range(100):
        node.add_bytes(path, wbytes=200 * MB)
        if (path / "io.max").read_text() == CEILING_LINE:
            return
        time.sleep(0.1)
    pytest.fail("no throttle")


@pytest.mark.parametrize("on_exit", ["keep", "remove"])
def test_serves_metrics_and_health_then_exits_cleanly_on_sigterm(node: FakeNode, on_exit: str):
    path = node.add_pod("etl", UID, annotations={"limiter.gpu-serving.io/cpu-weight": "20"})
    triton = node.add_pod("triton-0", TRITON, labels={"app.kubernetes.io/name": "triton"})
    node.set_pressure(35.0, triton)  # Triton waits for the disk
    agent, port = start(node, on_exit)
    try:
        burst_until_throttled(node, path)
        status, text = get(port, "/metrics")
        assert status == 200
        assert "cgroup_limiter_scan_duration_seconds_count" in text
        assert 'cgroup_limiter_throttle_events_total{action="throttle",device="254:0"' in text
        assert 'cgroup_limiter_io_pressure_some_avg10{scope="protected"} 35.0' in text
        assert "cgroup_limiter_contention 1.0" in text
        assert "cgroup_limiter_pressure_unavailable 0.0" in text
        assert get(port, "/nothing")[0] == 404
    finally:
        agent.send_signal(signal.SIGTERM)
        output = agent.communicate(timeout=10)[0]
    assert agent.returncode == 0, output
    assert "signal SIGTERM: stopping" in output
    assert "new pod cgroups: inotify on" in output
    if on_exit == "keep":
        assert (path / "io.max").read_text() == CEILING_LINE
        assert (path / "cpu.weight").read_text() == "20"
        assert UID in (node.base / "state.json").read_text()
    else:
        assert (path / "io.max").read_text() == f"{DISK} rbps=max wbps=max riops=max wiops=max"
        assert (path / "cpu.weight").read_text() == "39"


def test_healthz_answers_503_once_scans_stop(node: FakeNode):
    agent = node.agent()
    server = serve(agent.metrics, agent.healthy, "127.0.0.1", 0)
    port = server.server_address[1]
    try:
        assert get(port, "/healthz")[0] == 503  # no scan yet
        agent.scan()
        assert get(port, "/healthz") == (200, "ok\n")
        node.clock.now += 11  # the loop stopped scanning (max(3 intervals, 10 s) ago)
        assert get(port, "/healthz")[0] == 503
    finally:
        server.shutdown()


def test_bad_config_exits_2_naming_the_key(node: FakeNode):
    (node.base / "config.yaml").write_text("on_exit: later\n")
    run = subprocess.run(
        [sys.executable, "-m", "cgroup_limiter", "--config", str(node.base / "config.yaml"), "--pods-file", "x"],
        env={**os.environ, "PYTHONPATH": str(LIMITER)},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2
    assert "config.yaml: on_exit: expected one of keep, remove" in run.stderr


def test_kubernetes_source_needs_a_node_name(node: FakeNode):
    (node.base / "config.yaml").write_text("{}\n")
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    run = subprocess.run(
        [sys.executable, "-m", "cgroup_limiter", "--config", str(node.base / "config.yaml")],
        env={**env, "PYTHONPATH": str(LIMITER)},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2
    assert "NODE_NAME is empty" in run.stderr
