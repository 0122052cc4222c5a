"""The agent end to end on a fake cgroup tree: throttle, protect, lift, write only on change, restart."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from cgroup_limiter.state import load_state
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.limiter.conftest import DISK, MB, FakeNode, sample

NOISY = "0b6f7c1e-1111-4a4a-9c9c-000000000001"
TRITON = "0b6f7c1e-2222-4a4a-9c9c-000000000002"
CEILING_LINE = f"{DISK} rbps=max wbps=50000000 riops=max wiops=max"
UNLIMITED_LINE = f"{DISK} rbps=max wbps=max riops=max wiops=max"


def writes(agent, file: str = "io.max") -> float:
    return sample(agent, "cgroup_limiter_writes_total", file=file) or 0.0


def noisy_and_triton(node: FakeNode):
    noisy = node.add_pod("etl", NOISY, namespace="batch")
    triton = node.add_pod("triton-0", TRITON, labels={"app.kubernetes.io/name": "triton"}, driver="systemd")
    return noisy, triton


def test_throttles_after_k_intervals_spares_protected_and_lifts_after_calm(node):
    noisy, triton = noisy_and_triton(node)
    agent = node.agent()
    agent.scan()  # the first sample: no rate yet
    for interval in range(1, 4):
        node.add_bytes(noisy, wbytes=150 * MB)
        node.add_bytes(triton, rbytes=400 * MB, wbytes=400 * MB)
        node.tick(agent)
        written = (noisy / "io.max").read_text()
        assert (written == CEILING_LINE) == (interval == 3), f"interval {interval}: {written!r}"
    assert (triton / "io.max").read_text() == ""
    labels = {"namespace": "batch", "pod": "etl", "device": DISK, "direction": "write"}
    assert sample(agent, "cgroup_limiter_throttle_events_total", **labels, action="throttle") == 1
    assert sample(agent, "cgroup_limiter_pod_io_limit_bytes_per_second", **labels) == 50 * MB
    assert sample(agent, "cgroup_limiter_pod_io_bytes_per_second", **labels) == 150 * MB
    assert sample(agent, "cgroup_limiter_pod_cgroups", state="protected") == 1

    # At the ceiling (above release_bps) the pod stays throttled: no flapping.
    for _ in range(10):
        node.add_bytes(noisy, wbytes=50 * MB)
        node.tick(agent)
    assert (noisy / "io.max").read_text() == CEILING_LINE
    assert writes(agent) == 1

    # Calm: below release_bps for calm_intervals (4) scans, then the limit goes.
    for interval in range(1, 5):
        node.add_bytes(noisy, wbytes=1 * MB)
        node.tick(agent)
        assert ((noisy / "io.max").read_text() == UNLIMITED_LINE) == (interval == 4)
    assert sample(agent, "cgroup_limiter_throttle_events_total", **labels, action="release") == 1
    assert sample(agent, "cgroup_limiter_pod_io_limit_bytes_per_second", **labels) is None
    assert writes(agent) == 2
    assert (triton / "io.max").read_text() == ""


def test_a_burst_interrupted_before_k_intervals_is_not_throttled(node):
    noisy, _ = noisy_and_triton(node)
    agent = node.agent()
    agent.scan()
    for rate in (150, 150, 10, 150, 150, 10, 150):
        node.add_bytes(noisy, wbytes=rate * MB)
        node.tick(agent)
    assert (noisy / "io.max").read_text() == ""
    assert writes(agent) == 0


def test_reads_are_throttled_on_their_own_key(node):
    noisy, _ = noisy_and_triton(node)
    agent = node.agent()
    agent.scan()
    for _ in range(3):
        node.add_bytes(noisy, rbytes=200 * MB)
        node.tick(agent)
    assert (noisy / "io.max").read_text() == f"{DISK} rbps=50000000 wbps=max riops=max wiops=max"


def test_static_limits_from_annotations_and_writes_only_on_change(node):
    path = node.add_pod(
        "loader",
        NOISY,
        annotations={
            "limiter.gpu-serving.io/io-max": "vda rbps=200M wiops=500",
            "limiter.gpu-serving.io/cpu-weight": "50",
            "limiter.gpu-serving.io/cpu-max": "200000 100000",
        },
    )
    agent = node.agent()
    agent.scan()
    assert (path / "io.max").read_text() == f"{DISK} rbps=200000000 wbps=max riops=max wiops=500"
    assert (path / "cpu.weight").read_text() == "50"
    assert (path / "cpu.max").read_text() == "200000 100000"
    stamps = {name: (path / name).stat().st_mtime_ns for name in ("io.max", "cpu.weight", "cpu.max")}
    for _ in range(5):
        node.tick(agent)
    assert {name: (path / name).stat().st_mtime_ns for name in stamps} == stamps
    assert [writes(agent, f) for f in ("io.max", "cpu.weight", "cpu.max")] == [1, 1, 1]
    assert sample(agent, "cgroup_limiter_pod_cpu_max_cores", namespace="default", pod="loader") == 2.0

    # The annotations go: io.max back to unlimited, cpu.* back to what the kubelet had written.
    node.pods[0]["metadata"]["annotations"] = {}
    node.write_pods()
    node.tick(agent)
    assert (path / "io.max").read_text() == UNLIMITED_LINE
    assert (path / "cpu.weight").read_text() == "39"
    assert (path / "cpu.max").read_text() == "max 100000"


def test_a_static_limit_tightens_the_ceiling_never_loosens_it(node):
    path = node.add_pod("etl", NOISY, annotations={"limiter.gpu-serving.io/io-max": "254:0 wbps=20M"})
    agent = node.agent()
    agent.scan()
    for _ in range(4):
        node.add_bytes(path, wbytes=150 * MB)
        node.tick(agent)
    assert (path / "io.max").read_text() == f"{DISK} rbps=max wbps=20000000 riops=max wiops=max"


def test_value_already_in_place_is_recorded_not_rewritten(node):
    path = node.add_pod("loader", NOISY, annotations={"limiter.gpu-serving.io/cpu-weight": "39"})
    agent = node.agent()
    agent.scan()
    assert writes(agent, "cpu.weight") == 0
    assert load_state(node.base / "state.json").pods[NOISY].applied == {"cpu.weight": "39"}
    assert (path / "cpu.weight").read_text() == "39\n"


def test_restart_keeps_the_throttle_without_flapping(node):
    noisy, _ = noisy_and_triton(node)
    first = node.agent()
    first.scan()
    for _ in range(3):
        node.add_bytes(noisy, wbytes=150 * MB)
        node.tick(first)
    first.shutdown()  # on_exit: keep
    assert (noisy / "io.max").read_text() == CEILING_LINE
    recorded = json.loads((node.base / "state.json").read_text())
    assert recorded["pods"][NOISY]["throttled"] == [[DISK, "write"]]

    second = node.agent()
    second.scan()
    for _ in range(3):
        node.add_bytes(noisy, wbytes=50 * MB)
        node.tick(second)
    assert writes(second) == 0
    assert (noisy / "io.max").read_text() == CEILING_LINE
    for _ in range(4):  # and it still lifts after the calm period
        node.tick(second)
    assert (noisy / "io.max").read_text() == UNLIMITED_LINE


def test_drift_is_corrected_at_resync(node):
    noisy = node.add_pod("loader", NOISY, annotations={"limiter.gpu-serving.io/cpu-weight": "50"})
    agent = node.agent(resync_intervals=5)
    agent.scan()
    (noisy / "cpu.weight").write_text("100")  # someone else wrote it
    for _ in range(4):  # between resyncs the agent trusts what it recorded: no reads
        node.tick(agent)
    assert (noisy / "cpu.weight").read_text() == "100"
    node.tick(agent)  # the 5th scan since the first
    assert (noisy / "cpu.weight").read_text() == "50"
    assert writes(agent, "cpu.weight") == 2


def test_on_exit_remove_restores_every_file(node):
    noisy = node.add_pod("etl", NOISY, annotations={"limiter.gpu-serving.io/cpu-max": "50000"})
    agent = node.agent(on_exit="remove")
    agent.scan()
    for _ in range(3):
        node.add_bytes(noisy, wbytes=150 * MB)
        node.tick(agent)
    assert (noisy / "cpu.max").read_text() == "50000 100000"
    agent.shutdown()
    assert (noisy / "io.max").read_text() == UNLIMITED_LINE
    assert (noisy / "cpu.max").read_text() == "max 100000"
    assert load_state(node.base / "state.json").pods == {}


def test_pods_unknown_to_the_source_are_never_limited(node):
    path = node.cgroup_path("9f9f9f9f-0000-0000-0000-00000000000f", "besteffort", "systemd")
    path.mkdir(parents=True)
    (path / "io.stat").write_text("")
    agent = node.agent(defaults={"cpu_weight": 10})
    agent.scan()
    assert not (path / "cpu.weight").exists()
    assert sample(agent, "cgroup_limiter_pod_cgroups", state="unidentified") == 1


def test_vanished_pod_drops_its_state_and_series(node):
    noisy, _ = noisy_and_triton(node)
    agent = node.agent()
    agent.scan()
    for _ in range(3):
        node.add_bytes(noisy, wbytes=150 * MB)
        node.tick(agent)
    for child in noisy.iterdir():
        child.unlink()
    noisy.rmdir()
    node.tick(agent)
    assert NOISY not in agent.pods
    assert NOISY not in load_state(node.base / "state.json").pods
    labels = {"namespace": "batch", "pod": "etl", "device": DISK, "direction": "write"}
    assert sample(agent, "cgroup_limiter_pod_io_limit_bytes_per_second", **labels) is None


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([0, 10, 30, 60, 150, 400]), min_size=1, max_size=40))
def test_io_max_is_written_once_per_transition_and_always_matches_the_trigger(rates_mb):
    with tempfile.TemporaryDirectory() as tmp:
        node = FakeNode(Path(tmp))
        path = node.add_pod("etl", NOISY)
        agent = node.agent()
        agent.scan()
        for rate in rates_mb:
            node.add_bytes(path, wbytes=rate * MB)
            node.tick(agent)
            throttled = any(t.throttled for t in agent.pods[NOISY].triggers.values())
            content = (path / "io.max").read_text()
            assert (content == CEILING_LINE) == throttled
        events = sum(
            sample(agent, "cgroup_limiter_throttle_events_total", **labels) or 0
            for labels in (
                {"namespace": "default", "pod": "etl", "device": DISK, "direction": "write", "action": action}
                for action in ("throttle", "release")
            )
        )
        assert writes(agent) == events
