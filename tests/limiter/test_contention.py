"""Contention mode on the fake tree: throttle the heaviest unprotected pods only while a protected
pod waits for IO (its io.pressure), lift with hysteresis; an idle disk's lone writer runs free."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from cgroup_limiter.state import load_state
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.limiter.conftest import CONTENTION_MODE, DISK, MB, FakeNode, sample

TRITON = "7c000000-0000-4000-8000-000000000001"
HEAVY = "7c000000-0000-4000-8000-000000000002"
MEDIUM = "7c000000-0000-4000-8000-000000000003"
LIGHT = "7c000000-0000-4000-8000-000000000004"
TINY = "7c000000-0000-4000-8000-000000000005"
CEILING_LINE = f"{DISK} rbps=max wbps=50000000 riops=max wiops=max"
UNLIMITED_LINE = f"{DISK} rbps=max wbps=max riops=max wiops=max"
TRITON_LABELS = {"app.kubernetes.io/name": "triton", "app.kubernetes.io/part-of": "gpu-serving"}


def io_max(path: Path) -> str:
    return (path / "io.max").read_text()


def contended(agent) -> float | None:
    return sample(agent, "cgroup_limiter_contention")


class Scene:
    """Triton (protected) and four batch pods writing 300, 200, 80 and 0.5 MB/s."""

    def __init__(self, node: FakeNode, **config: object) -> None:
        self.node = node
        self.triton = node.add_pod("triton-0", TRITON, labels=TRITON_LABELS, namespace="triton", driver="systemd")
        self.heavy = node.add_pod("heavy", HEAVY, namespace="batch")
        self.medium = node.add_pod("medium", MEDIUM, namespace="batch")
        self.light = node.add_pod("light", LIGHT, namespace="batch")
        self.tiny = node.add_pod("tiny", TINY, namespace="batch")
        self.rates = {self.heavy: 300, self.medium: 200, self.light: 80, self.tiny: 0.5}
        self.agent = node.agent(adaptive=CONTENTION_MODE, **config)
        self.agent.scan()

    def interval(self, pressure: float, triton_mbps: float = 40) -> None:
        """One second: every pod does its IO, Triton's io.pressure reads `pressure`."""
        for path, mbps in self.rates.items():
            self.node.add_bytes(path, wbytes=int(mbps * MB))
        self.node.add_bytes(self.triton, rbytes=int(triton_mbps * MB))
        self.node.set_pressure(pressure, self.triton)
        self.node.tick(self.agent)

    def capped(self) -> list[str]:
        names = {self.heavy: "heavy", self.medium: "medium", self.light: "light", self.tiny: "tiny"}
        return [name for path, name in names.items() if io_max(path) == CEILING_LINE]


def test_idle_disk_one_heavy_writer_runs_free(node: FakeNode):
    writer = node.add_pod("etl", HEAVY, namespace="batch")
    agent = node.agent(adaptive=CONTENTION_MODE)
    agent.scan()
    for _ in range(20):
        node.add_bytes(writer, wbytes=900 * MB)
        node.set_pressure(60.0)  # its own IO wait shows in the node's PSI: not contention
        node.tick(agent)
    assert io_max(writer) == ""
    assert contended(agent) == 0
    assert sample(agent, "cgroup_limiter_io_pressure_some_avg10", scope="node") == 60.0
    assert sample(agent, "cgroup_limiter_io_pressure_some_avg10", scope="protected") == 0.0
    assert sample(agent, "cgroup_limiter_writes_total", file="io.max") is None


def test_the_heaviest_are_throttled_while_triton_waits_then_lifted_with_hysteresis(node: FakeNode):
    scene = Scene(node)
    scene.interval(pressure=30)
    assert scene.capped() == [] and contended(scene.agent) == 0  # one scan above is not yet contention
    scene.interval(pressure=30)
    assert contended(scene.agent) == 1
    # max_throttled 2: the two heaviest; light (80 MB/s) waits for a slot, tiny is below min_rate_bps.
    assert scene.capped() == ["heavy", "medium"]
    assert io_max(scene.triton) == ""
    labels = {"namespace": "batch", "pod": "heavy", "device": DISK, "direction": "write"}
    assert sample(scene.agent, "cgroup_limiter_pod_throttled", **labels) == 1
    assert sample(scene.agent, "cgroup_limiter_pod_io_limit_bytes_per_second", **labels) == 50 * MB

    scene.rates.update({scene.heavy: 50, scene.medium: 50})  # held at the ceiling
    for pressure in (8, 5, 3, 2.5, 1, 1):  # between release (2) and trigger (10): still contention
        scene.interval(pressure)
    assert contended(scene.agent) == 1 and len(scene.capped()) == 2
    scene.interval(pressure=1)  # the third scan in a row below 2%
    assert contended(scene.agent) == 0
    assert [io_max(p) for p in (scene.heavy, scene.medium)] == [UNLIMITED_LINE] * 2
    assert io_max(scene.light) == ""
    assert sample(scene.agent, "cgroup_limiter_writes_total", file="io.max") == 4  # two caps, two lifts
    assert load_state(node.base / "state.json").contended is False


def test_a_throttled_pod_that_goes_quiet_frees_its_slot_for_the_next_heaviest(node: FakeNode):
    scene = Scene(node)
    for _ in range(2):
        scene.interval(pressure=30)
    assert scene.capped() == ["heavy", "medium"]
    scene.rates[scene.heavy] = 0
    for _ in range(2):
        scene.interval(pressure=30)
    assert scene.capped() == ["heavy", "medium"]  # quiet for 2 scans, calm_intervals is 3
    scene.interval(pressure=30)
    assert scene.capped() == ["medium", "light"]
    assert io_max(scene.heavy) == UNLIMITED_LINE


def test_triton_alone_at_full_speed_is_never_throttled(node: FakeNode):
    triton = node.add_pod("triton-0", TRITON, labels=TRITON_LABELS, namespace="triton")
    agent = node.agent(adaptive=CONTENTION_MODE)
    agent.scan()
    for _ in range(10):
        node.add_bytes(triton, rbytes=800 * MB, wbytes=800 * MB)
        node.set_pressure(90.0, triton)
        node.tick(agent)
    assert contended(agent) == 1  # Triton waits for the disk, but there is nobody to throttle
    assert io_max(triton) == ""
    assert sample(agent, "cgroup_limiter_pod_cgroups", state="protected") == 1


def test_a_pod_may_ask_for_the_threshold_mode(node: FakeNode):
    mode = {"limiter.gpu-serving.io/adaptive-mode": "threshold"}
    asked = node.add_pod("loader", HEAVY, annotations=mode, namespace="batch")
    others = node.add_pod("etl", MEDIUM, namespace="batch")
    agent = node.agent(adaptive=CONTENTION_MODE)
    agent.scan()
    for _ in range(2):  # CONTENTION_MODE's trigger_intervals; threshold_bps is the default 100M
        node.add_bytes(asked, wbytes=150 * MB)
        node.add_bytes(others, wbytes=150 * MB)
        node.tick(agent)
    assert io_max(asked) == CEILING_LINE  # no pressure needed: its own rate decides
    assert io_max(others) == ""


def test_pressure_unreadable_never_throttles_and_says_so_once(node: FakeNode, caplog):
    caplog.set_level(logging.INFO)
    scene = Scene(node)
    node.node_pressure.unlink()  # a kernel without PSI has neither file
    (scene.triton / "io.pressure").unlink()
    for _ in range(5):
        for path, mbps in scene.rates.items():
            node.add_bytes(path, wbytes=int(mbps * MB))
        node.tick(scene.agent)
    assert scene.capped() == []
    assert sample(scene.agent, "cgroup_limiter_pressure_unavailable") == 1
    assert sample(scene.agent, "cgroup_limiter_io_pressure_some_avg10", scope="node") is None
    assert sample(scene.agent, "cgroup_limiter_errors_total", reason="pressure_unavailable") == 10
    assert caplog.text.count("proc-pressure-io: No such file or directory") == 1
    assert caplog.text.count("io.pressure: No such file or directory") == 1
    assert caplog.text.count("contention mode does not throttle") == 1

    node.set_pressure(0.0)  # PSI back (a file system remounted, a cgroup recreated)
    node.set_pressure(30.0, scene.triton)
    for _ in range(2):
        scene.interval(pressure=30)
    assert sample(scene.agent, "cgroup_limiter_pressure_unavailable") == 0
    assert scene.capped() == ["heavy", "medium"]
    assert "node IO pressure readable again" in caplog.text


def test_malformed_pressure_is_counted_and_ignored(node: FakeNode):
    scene = Scene(node)
    for _ in range(3):
        scene.interval(pressure=30)
        (scene.triton / "io.pressure").write_text("some avg10=lots\n")
        node.tick(scene.agent)
    assert sample(scene.agent, "cgroup_limiter_errors_total", reason="malformed_pressure") == 3


def test_restart_keeps_the_contention_and_its_throttles(node: FakeNode):
    scene = Scene(node)
    for _ in range(2):
        scene.interval(pressure=30)
    scene.agent.shutdown()  # on_exit: keep
    assert load_state(node.base / "state.json").contended is True

    scene.agent = node.agent(adaptive=CONTENTION_MODE)
    scene.agent.scan()
    assert contended(scene.agent) == 1
    scene.interval(pressure=30)
    assert scene.capped() == ["heavy", "medium"]
    assert sample(scene.agent, "cgroup_limiter_writes_total", file="io.max") is None  # nothing rewritten
    for _ in range(3):
        scene.interval(pressure=0)
    assert scene.capped() == []


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([0, 1, 5, 12, 40]), st.sampled_from([0, 0.5, 30, 120, 400])),
        min_size=1,
        max_size=25,
    )
)
def test_throttles_only_under_contention_at_most_max_throttled_never_the_protected(steps):
    with tempfile.TemporaryDirectory() as tmp:
        node = FakeNode(Path(tmp))
        scene = Scene(node)
        for pressure, light_rate in steps:
            scene.rates[scene.light] = light_rate
            scene.interval(pressure)
            agent = scene.agent
            capped = scene.capped()
            assert len(capped) <= CONTENTION_MODE["max_throttled"]
            if contended(agent) == 0:
                assert capped == []
            assert io_max(scene.triton) == ""
            for uid, pod in agent.pods.items():
                if uid != TRITON:
                    assert (io_max(Path(pod.cgroup.path)) == CEILING_LINE) == bool(pod.throttled())
