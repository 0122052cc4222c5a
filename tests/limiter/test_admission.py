"""A new pod's static limits land within 2 s of its cgroup appearing: the running loop (a real
inotify on the temporary tree, a real thread) admits it between scans. Measured, not assumed:
each test times cgroup appearance -> limit in the file. The scan interval is set far above the
target, so a pass proves the wake-up path, not the scan."""

from __future__ import annotations

import contextlib
import logging
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cgroup_limiter.agent import Agent
from cgroup_limiter.inotify import IN_CREATE, IN_ISDIR, Event, parse_events
from cgroup_limiter.kube_source import KubernetesPodSource
from cgroup_limiter.pods import FilePodSource, PodSource
from cgroup_limiter.wakeup import CgroupWatcher

from tests.limiter.conftest import FakeNode, sample
from tests.limiter.kube_fake import FakeCoreV1, pod

TARGET_S = 2.0
SLOW_SCAN = {"interval_seconds": 30}
WEIGHT = {"limiter.gpu-serving.io/cpu-weight": "20"}


@contextlib.contextmanager
def running(agent: Agent) -> Iterator[Agent]:
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), name="agent-under-test")
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while agent.scans == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        yield agent
    finally:
        stop.set()
        agent.wake()
        thread.join(timeout=10)
    assert not thread.is_alive(), "the agent did not stop"


def agent_for(node: FakeNode, source: PodSource | None = None, **config: object) -> Agent:
    """A real-clock agent (run() sleeps for real), pods from the pods file unless given."""
    return Agent(node.config(**config), source or FilePodSource(node.pods_file, "node-a"), node.root)


def time_until_weight(path: Path, since: float, timeout: float = 10.0) -> float:
    while (path / "cpu.weight").read_text() != "20":
        if time.monotonic() - since > timeout:
            pytest.fail(f"{path}: no cpu.weight after {timeout}s")
        time.sleep(0.001)
    return time.monotonic() - since


def test_new_pod_cgroups_get_their_limits_through_inotify_within_the_target(node: FakeNode, caplog):
    caplog.set_level(logging.INFO)
    with running(agent_for(node, **SLOW_SCAN)) as agent:
        latencies = []
        for index in range(10):
            uid = f"a0000000-0000-4000-8000-{index:012d}"
            qos, driver = [("burstable", "cgroupfs"), ("besteffort", "systemd"), ("guaranteed", "systemd")][index % 3]
            started = time.monotonic()
            path = node.add_pod(f"new-{index}", uid, annotations=WEIGHT, qos=qos, driver=driver)
            latencies.append(time_until_weight(path, started))
        assert agent.scans == 1  # every one was admitted between scans
    print(f"cgroup appears -> cpu.weight written: max {max(latencies) * 1e3:.1f} ms over {len(latencies)} pods")
    assert max(latencies) < TARGET_S
    assert sample(agent, "cgroup_limiter_inotify") == 1
    assert sample(agent, "cgroup_limiter_limit_latency_seconds_count") == 10
    assert sample(agent, "cgroup_limiter_limit_latency_seconds_bucket", le="2.0") == 10
    assert "new pod cgroups: inotify on" in caplog.text


def test_a_pod_listed_after_its_cgroup_appeared_is_admitted_when_the_pods_file_changes(node: FakeNode):
    uid = "a1000000-0000-4000-8000-000000000001"
    with running(agent_for(node, **SLOW_SCAN)):
        path = node.add_pod("late", uid, annotations=WEIGHT, listed=False)
        time.sleep(0.2)
        assert (path / "cpu.weight").read_text() == "39\n"  # unknown to the source: never limited
        started = time.monotonic()
        node.list_pod("late", uid, annotations=WEIGHT)
        assert time_until_weight(path, started) < TARGET_S


def test_a_pod_the_watch_reports_after_its_cgroup_appeared_is_admitted_at_once(node: FakeNode):
    uid = "a2000000-0000-4000-8000-000000000001"
    api = FakeCoreV1([], version=10)
    source = KubernetesPodSource("node-a", api, backoff_seconds=0.05)
    with running(agent_for(node, source, **SLOW_SCAN)):
        watch = api.next_watch()
        path = node.add_pod("late", uid, annotations=WEIGHT, listed=False)
        time.sleep(0.2)
        started = time.monotonic()
        watch.send({"type": "ADDED", "object": pod(uid, "late", 11, annotations=WEIGHT)})
        assert time_until_weight(path, started) < TARGET_S


def test_kubepods_created_after_start_is_watched_too(node: FakeNode):
    uid = "a3000000-0000-4000-8000-000000000001"
    assert not (node.root / "kubepods").exists()
    with running(agent_for(node, **SLOW_SCAN)):
        started = time.monotonic()
        path = node.add_pod("first", uid, annotations=WEIGHT)  # creates kubepods/burstable as well
        assert time_until_weight(path, started) < TARGET_S


def test_without_inotify_the_scan_finds_new_pods_and_the_log_says_so(node: FakeNode, monkeypatch, caplog):
    caplog.set_level(logging.INFO)

    def no_inotify() -> None:
        raise OSError(24, "inotify_init1: Too many open files")

    monkeypatch.setattr("cgroup_limiter.wakeup.Inotify", no_inotify)
    interval = 0.3
    with running(agent_for(node, interval_seconds=interval)) as agent:
        started = time.monotonic()
        path = node.add_pod("new", "a4000000-0000-4000-8000-000000000001", annotations=WEIGHT)
        latency = time_until_weight(path, started)
    assert latency < interval + 0.25  # the next scan, not an event
    assert sample(agent, "cgroup_limiter_inotify") == 0
    assert "inotify unavailable ([Errno 24] inotify_init1: Too many open files); found by the scan" in caplog.text


def test_watcher_reports_directories_and_the_pods_file_only(node: FakeNode):
    watcher = CgroupWatcher(node.root, [node.pods_file])
    try:
        (node.root / "kubepods").mkdir()
        assert watcher.drain()  # kubepods appeared: now watched as well
        (node.root / "kubepods" / "burstable").mkdir()
        assert watcher.drain()
        (node.root / "kubepods" / "burstable" / "a-file").write_text("")
        (node.base / "unrelated.json").write_text("{}")
        assert not watcher.drain()
        node.write_pods()
        assert watcher.drain()
        assert str(node.root / "kubepods" / "burstable") in watcher.watched.values()
    finally:
        watcher.close()


def test_inotify_event_records_are_parsed_as_the_kernel_packs_them():
    name = b"kubepods-burstable-pod1.slice".ljust(32, b"\0")  # NUL-padded to an alignment boundary
    record = struct.pack("iIII", 5, IN_CREATE | IN_ISDIR, 0, len(name)) + name
    bare = struct.pack("iIII", 6, 0x8000, 0, 0)  # IN_IGNORED carries no name
    assert parse_events(record + bare) == [
        Event(5, IN_CREATE | IN_ISDIR, "kubepods-burstable-pod1.slice"),
        Event(6, 0x8000, ""),
    ]
