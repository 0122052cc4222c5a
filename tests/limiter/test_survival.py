"""The agent survives what a live node throws at it: it counts, logs and goes on."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

import pytest
from cgroup_limiter.agent import Agent, error_reason
from cgroup_limiter.iofiles import read_file
from cgroup_limiter.kube_source import KubernetesPodSource
from cgroup_limiter.pods import FilePodSource, PodInfo, PodSourceError
from cgroup_limiter.state import load_state

from tests.limiter.conftest import CONTENTION_MODE, DISK, MB, FakeNode, sample
from tests.limiter.kube_fake import FakeCoreV1, pod

UID = "5d1c0a2e-0000-4000-8000-000000000001"
OTHER = "5d1c0a2e-0000-4000-8000-000000000002"


def errors(agent: Agent, reason: str) -> float:
    return sample(agent, "cgroup_limiter_errors_total", reason=reason) or 0.0


class VanishingSource:
    """Between discovery and the pod's reads, the pod's cgroup disappears (the kubelet removed it)."""

    def __init__(self, inner: FilePodSource, doomed: Path) -> None:
        self.inner, self.doomed = inner, doomed

    def pods(self) -> Mapping[str, PodInfo]:
        if self.doomed.exists():
            shutil.rmtree(self.doomed)
        return self.inner.pods()


def test_cgroup_vanishing_mid_scan(node: FakeNode):
    doomed = node.add_pod("gone", UID)
    kept = node.add_pod("kept", OTHER, annotations={"limiter.gpu-serving.io/cpu-weight": "20"})
    source = VanishingSource(FilePodSource(node.pods_file), doomed)
    agent = Agent(node.config(), source, node.root, clock=node.clock)
    agent.scan()
    assert errors(agent, "vanished") == 1
    assert (kept / "cpu.weight").read_text() == "20"
    node.tick(agent)
    assert UID not in agent.pods


def test_malformed_io_stat_is_counted_and_the_good_lines_still_count(node: FakeNode):
    path = node.add_pod("etl", UID)
    agent = node.agent()
    agent.scan()
    for _ in range(3):
        node.add_bytes(path, wbytes=150 * MB)
        text = (path / "io.stat").read_text()
        (path / "io.stat").write_text(text + "garbage-line rbytes=x\n254:16 rbytes=12\n")
        node.tick(agent)
    assert errors(agent, "malformed_io_stat") == 3
    assert (path / "io.max").read_text().startswith(f"{DISK} rbps=max wbps=50000000")


def test_unknown_device_in_an_annotation(node: FakeNode):
    path = node.add_pod(
        "etl", UID, annotations={"limiter.gpu-serving.io/io-max": "sdz wbps=1M; nvme0n1 riops=100; 9:9 rbps=1M"}
    )
    agent = node.agent()
    agent.scan()
    assert errors(agent, "unknown_device") == 2
    assert (path / "io.max").read_text() == "259:0 rbps=max wbps=max riops=100 wiops=max"


def test_bad_annotation_is_ignored_with_a_named_error(node: FakeNode, caplog):
    path = node.add_pod(
        "etl",
        UID,
        annotations={"limiter.gpu-serving.io/cpu-weight": "heavy", "limiter.gpu-serving.io/cpu-max": "50000"},
    )
    agent = node.agent()
    agent.scan()
    assert errors(agent, "annotation") == 1
    assert "pod default/etl: annotation limiter.gpu-serving.io/cpu-weight" in caplog.text
    assert (path / "cpu.max").read_text() == "50000 100000"
    assert (path / "cpu.weight").read_text() == "39\n"


def test_pod_source_failure_keeps_the_last_answer_counts_each_time_logs_once(node: FakeNode, caplog):
    caplog.set_level(logging.INFO)
    path = node.add_pod("etl", UID, annotations={"limiter.gpu-serving.io/cpu-weight": "20"})
    agent = node.agent()
    agent.scan()
    node.pods_file.write_text("{not json")
    (path / "cpu.weight").write_text("39")
    agent.pods[UID].verified = False  # look at the file again on the next scan
    for _ in range(3):
        node.tick(agent)
    assert errors(agent, "pod_source") == 3
    assert caplog.text.count("not valid JSON") == 1
    assert (path / "cpu.weight").read_text() == "20"
    node.write_pods()
    node.tick(agent)
    assert "pod_source: answering again" in caplog.text


def test_broken_state_file_starts_fresh(node: FakeNode):
    (node.base / "state.json").write_text('{"version": 1, "pods": {"x": {"applied": [1]}}}')
    node.add_pod("etl", UID, annotations={"limiter.gpu-serving.io/cpu-weight": "20"})
    agent = node.agent()
    agent.scan()
    assert errors(agent, "state_file") == 1
    assert '"cpu.weight": "20"' in (node.base / "state.json").read_text()


def _read_only_bind(path: Path) -> bool:
    """A real read-only mount over path (needs CAP_SYS_ADMIN); False where that is not allowed."""
    bind = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True)
    if bind.returncode != 0:
        return False
    if subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", str(path)], check=True)
        return False
    return True


def test_read_only_cgroup_filesystem(node: FakeNode, monkeypatch):
    path = node.add_pod("etl", UID, annotations={"limiter.gpu-serving.io/cpu-weight": "20"})
    mounted = shutil.which("mount") is not None and os.geteuid() == 0 and _read_only_bind(node.root)
    if not mounted:  # no mount privilege here: the kernel's answer to a write on a ro mount, injected
        real_open = os.open

        def open_read_only(file: os.PathLike[str] | str, flags: int, *args: int) -> int:
            if flags & os.O_WRONLY:
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(file))
            return real_open(file, flags, *args)

        monkeypatch.setattr("cgroup_limiter.agent.os.open", open_read_only)
    try:
        agent = node.agent()
        agent.scan()
        node.tick(agent)
    finally:
        if mounted:
            subprocess.run(["umount", str(node.root)], check=True)
    assert errors(agent, "read_only") == 2  # nothing recorded, so every scan tries again
    assert (path / "cpu.weight").read_text() == "39\n"
    monkeypatch.undo()
    node.tick(agent)  # writable again: the next scan gets it done
    assert (path / "cpu.weight").read_text() == "20"


@pytest.mark.skipif(os.geteuid() != 0, reason="drops from root to nobody to meet a real EACCES")
def test_permission_denied_on_a_cgroup_file():
    """Run as nobody against root-owned 0644 files: the kernel's own EACCES, counted, no crash."""
    base = Path(tempfile.mkdtemp(prefix="limiter-eacces-"))
    try:
        node = FakeNode(base)
        path = node.add_pod("etl", UID, annotations={"limiter.gpu-serving.io/cpu-weight": "20"})
        for entry in [base, *base.rglob("*")]:
            entry.chmod(0o755 if entry.is_dir() else 0o644)
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover (the child reports through the pipe)
            os.close(read)
            try:
                os.setgid(65534)
                os.setuid(65534)
                agent = node.agent(state_file=None)
                agent.scan()
                os.write(write, f"{errors(agent, 'permission_denied')}".encode())
            finally:
                os._exit(0)
        os.close(write)
        reported = os.read(read, 100).decode()
        os.waitpid(child, 0)
        assert reported == "1.0"
        assert (path / "cpu.weight").read_text() == "39\n"
    finally:
        shutil.rmtree(base)


@pytest.mark.parametrize(
    ("number", "reason"),
    [
        (errno.ENOENT, "vanished"),
        (errno.ENODEV, "unknown_device"),
        (errno.EACCES, "permission_denied"),
        (errno.EROFS, "read_only"),
        (errno.EINVAL, "invalid_value"),
        (errno.EBUSY, "ebusy"),
    ],
)
def test_error_reasons(number: int, reason: str):
    assert error_reason(OSError(number, os.strerror(number))) == reason


def test_missing_cgroup_root_is_counted(tmp_path: Path):
    node = FakeNode(tmp_path)
    shutil.rmtree(node.root)
    agent = node.agent()
    agent.scan()
    assert errors(agent, "cgroup_root") == 1


def test_pod_source_error_names_the_file(tmp_path: Path):
    (tmp_path / "pods.json").write_text('{"items": [{"metadata": {"name": "x"}}]}')
    with pytest.raises(PodSourceError, match=r"pods.json: items\[0\]: metadata.uid is missing"):
        FilePodSource(tmp_path / "pods.json").pods()


def _throttled_pair(node: FakeNode) -> tuple[Agent, Path, Path]:
    """A heavy writer throttled under Triton's IO pressure (contention mode), and Triton."""
    writer = node.add_pod("etl", UID, namespace="batch")
    triton = node.add_pod("triton-0", OTHER, labels={"app.kubernetes.io/name": "triton"})
    agent = node.agent(adaptive=CONTENTION_MODE)
    agent.scan()
    for _ in range(2):
        node.add_bytes(writer, wbytes=300 * MB)
        node.set_pressure(40.0, triton)
        node.tick(agent)
    assert agent.pods[UID].throttled() == [(DISK, "write")]
    return agent, writer, triton


def _assert_forgotten(node: FakeNode, agent: Agent) -> None:
    assert UID not in agent.pods
    assert UID not in load_state(node.base / "state.json").pods
    labels = {"namespace": "batch", "pod": "etl", "device": DISK, "direction": "write"}
    for name in ("cgroup_limiter_pod_io_limit_bytes_per_second", "cgroup_limiter_pod_throttled"):
        assert sample(agent, name, **labels) is None, name


def test_pod_deleted_mid_write_is_forgotten_at_once(node: FakeNode, monkeypatch):
    agent, writer, triton = _throttled_pair(node)
    real_open = os.open

    def deleted_first(file: str, flags: int, *args: int, **kwargs: int) -> int:
        if flags & os.O_WRONLY and str(file).startswith(str(writer)):
            shutil.rmtree(writer)  # the kubelet removes the pod's cgroup just before our write
        return real_open(file, flags, *args, **kwargs)

    monkeypatch.setattr("cgroup_limiter.agent.os.open", deleted_first)
    for _ in range(3):  # contention ends: the agent wants to lift the cap, and meets ENOENT
        node.set_pressure(0.0, triton)
        node.tick(agent)
    assert errors(agent, "vanished") == 1
    _assert_forgotten(node, agent)


def test_cgroup_removed_between_reads_is_forgotten_not_taken_for_missing_psi(node: FakeNode, monkeypatch):
    agent, _, _ = _throttled_pair(node)
    doomed = node.add_pod("doomed", "5d1c0a2e-0000-4000-8000-000000000003", labels={"app.kubernetes.io/name": "triton"})
    node.tick(agent)
    real_read = read_file

    def removed_after_io_stat(path: str) -> str:
        if path == f"{doomed}/io.pressure":
            shutil.rmtree(doomed)
        return real_read(path)

    monkeypatch.setattr("cgroup_limiter.agent.read_file", removed_after_io_stat)
    node.tick(agent)
    assert errors(agent, "vanished") == 1
    assert errors(agent, "pressure_unavailable") == 0
    assert "5d1c0a2e-0000-4000-8000-000000000003" not in agent.pods
    assert agent.pods[UID].throttled() == [(DISK, "write")]  # the others go on as before


def test_api_server_unreachable_nothing_is_limited_until_it_answers(node: FakeNode, caplog):
    node.add_pod("etl", UID, annotations={"limiter.gpu-serving.io/cpu-weight": "20"})
    api = FakeCoreV1([pod(UID, "etl", 5, annotations={"limiter.gpu-serving.io/cpu-weight": "20"})])
    api.failures = [ConnectionRefusedError(111, "Connection refused")] * 3
    source = KubernetesPodSource("node-a", api, backoff_seconds=0.02)
    agent = Agent(node.config(), source, node.root, source.metrics, clock=node.clock)
    source.start(lambda: None)
    try:
        node.tick(agent)
        assert sample(agent, "cgroup_limiter_pod_cgroups", state="unidentified") == 1
        assert errors(agent, "pod_source") == 1
        assert "list failed: [Errno 111] Connection refused (using the last answer)" in caplog.text
        api.next_watch()  # the third retry listed
        node.tick(agent)
    finally:
        source.stop()
    path = node.cgroup_path(UID, "burstable", "cgroupfs")
    assert (path / "cpu.weight").read_text() == "20"
    assert sample(agent, "cgroup_limiter_pod_source_errors_total", reason="list") == 3
