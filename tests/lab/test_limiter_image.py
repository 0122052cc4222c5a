"""The limiter's image under containerd in the lab VM (issue 14, items 4 and 5), on a real cgroup v2 kernel.

The image `make image-limiter` builds runs under `ctr run` with the user, capabilities, seccomp,
read-only root, mounts and command of the rendered prod DaemonSet, and the rendered prod config with
the adaptive numbers scaled for TCG (limiter_lab.py says how). Pods are systemd scopes in pod slices
as kubelet's systemd driver lays them out, with direct-IO dd processes on the VM's disk:
  triton-0  the rendered prod Triton pod template's labels and annotations; idles, reads or writes
  etl-0     an unprotected heavy writer (Burstable)
  train-0   a Guaranteed pod that appears late, with a static io-max annotation
One agent serves the module; the tests run in file order and each leaves what the next expects:
  confinement: uid 0, no capability, no_new_privs, seccomp, read-only root
  (a) idle disk, one heavy writer: never limited, near the disk's speed
  (b) protected reads plus the heavy writer: the writer capped at the ceiling while the protected pod's
      io.pressure is high, lifted after its IO ends
  (d) a new pod: its static limit within 2 s of its cgroup appearing
  (c) the protected pod writing alone at full speed: never limited
  exit: SIGTERM, status 0, every limit removed
The numbers (MB/s, pressure, reaction times) are printed at the end (run with -s).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from platform_matrix import load
from serving.images.__main__ import cache_dir
from serving.images.apps import APPS
from serving.images.base import ensure_base
from serving.images.build import build, save
from serving.images.podman import podman
from tests.lab.conftest import LabNode
from tests.lab.limiter_lab import (
    ANNOTATION,
    CALM,
    CEILING,
    DATA,
    INTERVAL_S,
    PRESSURE,
    RELEASE,
    REMOTE,
    TRIGGER,
    CtrRun,
    LimiterLab,
    Pod,
    ctr_run,
    flag,
    lab_config,
    limits,
    rendered,
    sample,
    switched,
    triton_pod,
    writer,
)

pytestmark = pytest.mark.lab

STATIC = 6 * 2**20  # train-0's io-max wbps, below the adaptive ceiling so the two cannot be confused
MB = 1e6
REPORT: dict[str, float | str] = {}


@dataclass(frozen=True)
class Image:
    tag: str
    user: str
    archive: Path


@dataclass
class Deployed:
    lab: LimiterLab
    tag: str
    run: CtrRun
    triton: Pod
    etl: Pod
    baseline_bps: float
    pods: list[Pod] = field(default_factory=list)


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Image]:
    """The limiter image built here (as `make image-limiter`) and saved as a docker-archive; removed
    afterwards unless it was there before."""
    matrix = load()
    base, _ = ensure_base(matrix.data["container_base"], cache_dir(), matrix.path)
    started = time.monotonic()
    built = build(APPS["limiter"], base)
    try:
        archive = save(built.tag, tmp_path_factory.mktemp("limiter-image") / "limiter.tar")
        REPORT["image"] = built.tag
        REPORT["image_build_and_save_s"] = round(time.monotonic() - started, 1)
        REPORT["image_archive_mb"] = round(archive.stat().st_size / MB, 1)
        user = json.loads(podman("inspect", "--format={{json .Config}}", built.tag)).get("User", "")
        yield Image(built.tag, user, archive)
    finally:
        if not built.existed:
            podman("rmi", "--force", built.tag)


@pytest.fixture(scope="module")
def limiter(lab_node: LabNode, image: Image) -> Iterator[Deployed]:
    """The agent's container running on the VM with the rendered DaemonSet's confinement; triton-0 idle."""
    daemonset, config = rendered()
    run = ctr_run(daemonset, image.user, lab_node.name, f"{REMOTE}/config")
    config = lab_config(config)
    lab = LimiterLab(lab_node, config.get("state_file"))
    triton = triton_pod()
    etl = Pod("etl-0", "batch", "burstable", labels={"app": "etl"})
    try:
        lab.prepare(run, config)
        started = time.monotonic()
        lab.import_image(image.archive)
        REPORT["image_import_s"] = round(time.monotonic() - started, 1)
        lab.write_pods([triton, etl])
        lab.start(triton, switched("triton"))
        REPORT["agent_ready_s"] = round(lab.start_agent(image.tag, run), 1)
        baseline = lab.baseline(5)
        REPORT["disk_write_baseline_mb_s"] = round(baseline / MB, 1)
        yield Deployed(lab, image.tag, run, triton, etl, baseline, [triton, etl])
    finally:
        print(f"\nagent log (tail):\n{lab.agent_log()[-6000:]}")
        lab.cleanup()
        print("limiter image lab:", json.dumps(REPORT, indent=1))


@pytest.fixture(autouse=True)
def agent_running(request: pytest.FixtureRequest) -> None:
    """Each test of the deployed agent starts with it running, whichever test ran before (the SIGTERM
    test stops it): the tests pass in any order."""
    if "limiter" not in request.fixturenames:
        return
    deployed: Deployed = request.getfixturevalue("limiter")
    lab = deployed.lab
    if lab.node.run(f"test -s {REMOTE}/agent.rc", check=False).returncode == 0:
        lab.node.run(f"rm -f {REMOTE}/agent.rc")
        lab.start_agent(deployed.tag, deployed.run)


def unlimited(io_max_seen: list[str]) -> bool:
    return all(limits(text) == {} for text in io_max_seen)


def test_the_image_runs_the_agent_module_with_its_config_and_names_its_port_and_workdir(image: Image) -> None:
    """What the built image says of itself (podman inspect): the entrypoint and default command a plain
    `ctr run` or `docker run` gets, the metrics port and the working directory."""
    config = json.loads(podman("inspect", "--format={{json .Config}}", image.tag))
    assert config["Entrypoint"] == ["/opt/venv/bin/python", "-m", "cgroup_limiter"]
    assert config["Cmd"] == ["--config", "/etc/cgroup-limiter/config.yaml"]
    assert list(config["ExposedPorts"]) == ["9500/tcp"]
    assert (config["User"], config["WorkingDir"]) == ("0", "/opt/cgroup-limiter")


def test_the_agent_runs_as_uid_0_with_no_capability_and_a_read_only_root(limiter: Deployed) -> None:
    status = limiter.lab.agent_status()
    assert status["Uid"].split() == ["0"] * 4, status
    for capabilities in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[capabilities], 16) == 0, f"{capabilities} {status[capabilities]}: {status}"
    assert status["NoNewPrivs"] == "1", status  # allowPrivilegeEscalation: false
    assert status["Seccomp"] == "2", status  # a seccomp filter: RuntimeDefault
    assert "ro" in status["mount/"].split(","), status  # readOnlyRootFilesystem
    assert "ro" in status["mount/sys"].split(","), status
    assert "rw" in status["mount/sys/fs/cgroup"].split(","), status  # the hostPath it writes limits into


def test_a_an_idle_disk_lets_one_heavy_writer_run_at_full_speed(limiter: Deployed) -> None:
    lab, etl = limiter.lab, limiter.etl
    lab.start(etl, writer(f"{DATA}/etl.img"))
    lab.node.run(f"sleep {TRIGGER + 3}")
    (seen,) = lab.measure([etl.cgroup], 6)
    REPORT["a_heavy_writer_alone_mb_s"] = round(seen["wbps"] / MB, 1)
    assert unlimited(seen["io_max"]), f"etl limited on an idle disk: {seen['io_max']}"
    assert seen["wbps"] > 3 * CEILING, f"etl at {seen['wbps'] / MB:.1f} MB/s"
    assert seen["wbps"] >= 0.5 * limiter.baseline_bps, (
        f"etl at {seen['wbps'] / MB:.1f} MB/s, the disk at {limiter.baseline_bps / MB:.1f} MB/s"
    )
    samples = lab.metrics()
    assert sample(samples, "cgroup_limiter_contention") == [0]
    assert sum(sample(samples, "cgroup_limiter_pod_throttled", pod=etl.name)) == 0


def test_b_protected_io_gets_the_heavy_writer_throttled_until_it_ends(limiter: Deployed) -> None:
    lab, etl, triton = limiter.lab, limiter.etl, limiter.triton
    if lab.node.run(f"systemctl is-active --quiet {etl.scope_unit}", check=False).returncode != 0:
        lab.start(etl, writer(f"{DATA}/etl.img"))
    capped = f"wbps={CEILING}"
    got = lab.probe(
        "wait", "--cgroup", etl.cgroup, "--token", capped, "--touch", flag("triton-read"),
        "--pressure", triton.cgroup, "--timeout", "60", timeout=120,
    )  # fmt: skip
    assert got["at"] is not None, f"etl not capped within 60 s of triton's reads; io.max {got['io_max']!r}"
    REPORT["b_throttle_after_protected_io_s"] = round(got["at"] - got["start"], 2)
    REPORT["b_protected_some_avg10_at_throttle"] = got["some_avg10"]

    lab.node.run("sleep 2")  # blk-throttle settles within its first slices
    etl_seen, triton_seen = lab.measure([etl.cgroup, triton.cgroup], 8)
    REPORT["b_throttled_writer_mb_s"] = round(etl_seen["wbps"] / MB, 2)
    REPORT["b_ceiling_mb_s"] = round(CEILING / MB, 2)
    REPORT["b_protected_reads_mb_s"] = round(triton_seen["rbps"] / MB, 1)
    REPORT["b_protected_some_avg10"] = triton_seen["some_avg10"]
    assert abs(etl_seen["wbps"] - CEILING) <= 0.15 * CEILING, f"etl at {etl_seen['wbps']:.0f} B/s"
    assert unlimited(triton_seen["io_max"]), f"the protected pod was limited: {triton_seen['io_max']}"
    assert triton_seen["rbps"] > 2 * CEILING, f"protected reads at {triton_seen['rbps'] / MB:.1f} MB/s"
    # Throttled, the protected pod waits less, but its pressure stays above release: the cap holds.
    assert triton_seen["some_avg10"] > RELEASE, triton_seen
    samples = lab.metrics()
    assert sample(samples, "cgroup_limiter_contention") == [1]
    assert max(sample(samples, "cgroup_limiter_io_pressure_some_avg10", scope="protected")) > RELEASE
    write = {"pod": etl.name, "namespace": etl.namespace, "device": lab.device, "direction": "write"}
    assert sample(samples, "cgroup_limiter_pod_throttled", **write) == [1]
    assert sample(samples, "cgroup_limiter_pod_io_limit_bytes_per_second", **write) == [CEILING]
    assert sum(sample(samples, "cgroup_limiter_pod_throttled", pod=triton.name)) == 0

    # The protected reads end: the cap stays until the pressure has been below release for CALM scans.
    lifted = lab.probe(
        "wait", "--cgroup", etl.cgroup, "--token", capped, "--absent", "--remove", flag("triton-read"),
        "--pressure", triton.cgroup, "--timeout", "150", timeout=220,
    )  # fmt: skip
    assert lifted["at"] is not None, f"etl still capped 150 s after triton's reads ended: {lifted['io_max']!r}"
    REPORT["b_lift_after_protected_io_ended_s"] = round(lifted["at"] - lifted["start"], 1)
    REPORT["b_protected_some_avg10_at_lift"] = lifted["some_avg10"]
    assert lifted["at"] - lifted["start"] >= CALM * INTERVAL_S
    assert lifted["some_avg10"] < PRESSURE, lifted
    (after,) = lab.measure([etl.cgroup], 4)
    REPORT["b_writer_after_lift_mb_s"] = round(after["wbps"] / MB, 1)
    assert after["wbps"] > 2 * CEILING, f"etl at {after['wbps'] / MB:.1f} MB/s after the lift"
    samples = lab.metrics()
    assert sample(samples, "cgroup_limiter_contention") == [0]
    assert sum(sample(samples, "cgroup_limiter_throttle_events_total", action="release", pod=etl.name)) >= 1
    lab.stop(etl)


def test_d_a_new_pod_gets_its_static_limit_within_2_s_of_its_cgroup(limiter: Deployed) -> None:
    lab = limiter.lab
    train = Pod(
        "train-0", "batch", "guaranteed", labels={"app": "train"},
        annotations={f"{ANNOTATION}io-max": f"{lab.device} wbps={STATIC}"},
    )  # fmt: skip
    limiter.pods.append(train)
    lab.write_pods(limiter.pods)  # the API server knows the pod before the kubelet makes its cgroup
    lab.node.run(f"sleep {3 * INTERVAL_S}")
    got = lab.probe(
        "appear", "--cgroup", train.cgroup, "--token", f"wbps={STATIC}", "--timeout", "30",
        "--run", lab.launch(train, writer(f"{DATA}/train.img")), timeout=90,
    )  # fmt: skip
    assert got["seen"] is not None, f"no cgroup {train.cgroup} within 30 s"
    assert got["limited"] is not None, f"{train.cgroup} not limited within 30 s; io.max {got['io_max']!r}"
    lab.check_scope(train)
    latency = got["limited"] - got["seen"]
    REPORT["d_static_limit_after_cgroup_appeared_s"] = round(latency, 3)
    REPORT["d_static_limit_after_scope_start_s"] = round(got["limited"] - got["start"], 3)
    assert latency <= 2.0, f"static limit written {latency:.2f} s after the cgroup appeared"

    lab.node.run("sleep 1")
    (seen,) = lab.measure([train.cgroup], 6)
    REPORT["d_static_limited_writer_mb_s"] = round(seen["wbps"] / MB, 2)
    REPORT["d_static_limit_mb_s"] = round(STATIC / MB, 2)
    assert abs(seen["wbps"] - STATIC) <= 0.15 * STATIC, f"train-0 at {seen['wbps']:.0f} B/s"
    samples = lab.metrics()
    count = sum(sample(samples, "cgroup_limiter_limit_latency_seconds_count"))
    assert count >= 1
    REPORT["d_agent_limit_latency_mean_s"] = round(
        sum(sample(samples, "cgroup_limiter_limit_latency_seconds_sum")) / count, 3
    )
    lab.stop(train)


def test_c_a_protected_pod_writing_alone_is_never_throttled(limiter: Deployed) -> None:
    lab, triton = limiter.lab, limiter.triton
    lab.node.run(f"touch {flag('triton-write')}")
    try:
        (seen,) = lab.measure([triton.cgroup], TRIGGER + 8)
    finally:
        lab.node.run(f"rm -f {flag('triton-write')}")
    REPORT["c_protected_writer_alone_mb_s"] = round(seen["wbps"] / MB, 1)
    REPORT["c_protected_some_avg10"] = seen["some_avg10"]
    assert unlimited(seen["io_max"]), f"the protected pod was limited: {seen['io_max']}"
    assert seen["wbps"] >= 0.5 * limiter.baseline_bps, (
        f"triton at {seen['wbps'] / MB:.1f} MB/s, the disk at {limiter.baseline_bps / MB:.1f} MB/s"
    )
    samples = lab.metrics()
    assert sum(sample(samples, "cgroup_limiter_pod_throttled", pod=triton.name)) == 0
    assert sum(sample(samples, "cgroup_limiter_throttle_events_total", pod=triton.name)) == 0


def test_sigterm_ends_the_agent_with_status_0_and_removes_every_limit(limiter: Deployed) -> None:
    lab = limiter.lab
    held = Pod(
        "held-0", "batch", "guaranteed", labels={"app": "held"},
        annotations={f"{ANNOTATION}io-max": f"{lab.device} wbps={STATIC}"},
    )  # fmt: skip
    limiter.pods.append(held)
    lab.write_pods(limiter.pods)
    got = lab.probe(
        "appear", "--cgroup", held.cgroup, "--token", f"wbps={STATIC}", "--timeout", "30",
        "--run", lab.launch(held, writer(f"{DATA}/held.img")), timeout=90,
    )  # fmt: skip
    assert got["limited"] is not None, f"no limit to remove: {held.cgroup} not limited; io.max {got['io_max']!r}"
    try:
        assert lab.stop_agent() == "0", lab.agent_log()
        assert "exit: limits removed" in lab.agent_log()
        for pod in limiter.pods:  # a pod whose scope has ended has no cgroup, and so no limit
            io_max = lab.node.run(f"cat {pod.cgroup}/io.max 2>/dev/null", check=False).stdout
            assert limits(io_max) == {}, f"{pod.name} keeps a limit after the agent's exit: {io_max!r}"
    finally:
        lab.stop(held)
