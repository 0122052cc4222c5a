"""The cgroup limiter's cost and reaction time on a fake node (`make bench-limiter`).

1. Scan cost at 100, 1,000 and 5,000 pod cgroups (target: 1,000 pods scanned every second
   under 2% of one core), with everything a scan does on a node: pods from the Kubernetes watch
   (the pod source's thread, fed by a stand-in API server that streams one changed pod and one
   bookmark per interval: a churn far above a real node's), io.stat of every pod, io.pressure of
   the protected pods (one in fifty) and /proc/pressure/io, contention mode under pressure
   (the heaviest three of the writers above min_rate_bps throttled). CPU: the scanning thread's
   (time.thread_time) plus the watch thread's (its pthread CPU clock), per scan; wall: the
   scan's median. ms/scrape is one rendering of /metrics (per Prometheus scrape, not per scan).
2. Reaction time: the agent's real loop (one scan a second) on a tree of 1,000 pods; new pods
   appear one by one (the watch announces each before its cgroup appears, as the kubelet
   creates cgroups for pods the API already has) and the time from the cgroup's appearance to
   its cpu.weight being written is measured, with inotify (target <= 2 s), then without it
   (the scan alone finds them).
3. With --lab NODE, the threshold mode's reaction on the lab VM's real kernel (K+1 intervals).

The fake tree lives under /dev/shm when it exists (in memory, like cgroupfs).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "limiter")]

from cgroup_limiter.agent import Agent  # noqa: E402
from cgroup_limiter.config import parse_config  # noqa: E402
from cgroup_limiter.kube_source import KubernetesPodSource  # noqa: E402
from prometheus_client import generate_latest  # noqa: E402

from tests.limiter.kube_fake import FakeCoreV1, WatchResponse, pod  # noqa: E402

SIZES = (100, 1000, 5000)
TARGET_CORE_SHARE = 0.02
TARGET_REACTION_S = 2.0
DEVICE = "254:0"
MB = 1_000_000
WEIGHT = {"limiter.gpu-serving.io/cpu-weight": "50"}
PSI = "some avg10={:.2f} avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"


def cgroup_path(base: Path, index: int, uid: str) -> Path:
    """Half cgroupfs, half systemd, across the QoS classes."""
    qos = ("guaranteed", "burstable", "besteffort")[index % 3]
    if index % 2:
        unit = uid.replace("-", "_")
        top = base / "cgroup/kubepods.slice"
        name = (
            f"kubepods-pod{unit}.slice"
            if qos == "guaranteed"
            else f"kubepods-{qos}.slice/kubepods-{qos}-pod{unit}.slice"
        )
        return top / name
    top = base / "cgroup/kubepods"
    return top / (f"pod{uid}" if qos == "guaranteed" else f"{qos}/pod{uid}")


def make_cgroup(base: Path, index: int, uid: str, pressure: float) -> Path:
    """Built aside and renamed into place: the directory appears with its files, as on cgroupfs."""
    path = cgroup_path(base, index, uid)
    path.parent.mkdir(parents=True, exist_ok=True)
    aside = base / f"new-{uid}"
    aside.mkdir()
    for name, body in (
        ("io.stat", ""),
        ("io.max", ""),
        ("io.pressure", PSI.format(pressure)),
        ("cpu.weight", "100\n"),
        ("cpu.max", "max 100000\n"),
    ):
        (aside / name).write_text(body)
    aside.rename(path)
    return path


def manifest(index: int, uid: str, version: int, new: bool = False) -> dict[str, Any]:
    """One in fifty is a serving pod (protected), one in four has a cpu-weight; new pods: batch, weighted."""
    protected = index % 50 == 0 and not new
    labels = {"app.kubernetes.io/part-of": "gpu-serving"} if protected else {"app": "batch"}
    weighted = index % 4 == 0 or new
    return pod(uid, f"pod-{index}", version, labels=labels, annotations=WEIGHT if weighted else {})


def config(base: Path, interval: float = 1.0) -> Any:
    return parse_config(
        {
            "interval_seconds": interval,
            "sysfs_root": str(base / "sys"),
            "state_file": f"{base}/state.json",
            "node_pressure_file": str(base / "proc-pressure-io"),
            "protect": [{"labels": {"app.kubernetes.io/part-of": "gpu-serving"}}],
            "adaptive": {"mode": "contention", "max_throttled": 3},
        },
        "bench-config",
    )


@contextlib.contextmanager
def fake_node(count: int) -> Iterator[tuple[Path, list[Path], FakeCoreV1]]:
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(prefix="bench-limiter-", dir=shm if shm.is_dir() else None) as tmp:
        base = Path(tmp)
        (base / "sys/dev/block" / DEVICE).mkdir(parents=True)
        (base / "proc-pressure-io").write_text(PSI.format(45.0))
        paths, items = [], []
        for index in range(count):
            uid = str(uuid.UUID(int=index + 1))
            paths.append(make_cgroup(base, index, uid, 30.0 if index % 50 == 0 else 0.0))
            items.append(manifest(index, uid, 1))
        yield base, paths, FakeCoreV1(items, version=1)


def grow(paths: list[Path], step: int) -> None:
    for index, path in enumerate(paths):
        written = step * (150 if index % 10 == 0 else 5) * MB
        (path / "io.stat").write_text(
            f"{DEVICE} rbytes={step * MB // 10} wbytes={written} rios={step} wios={step} dbytes=0 dios=0\n"
        )


def thread_cpu(thread: threading.Thread) -> float:
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def scan_cost(count: int, scans: int) -> dict[str, float]:
    with fake_node(count) as (base, paths, api):
        now = [0.0]
        source = KubernetesPodSource("node-a", api)
        agent = Agent(config(base), source, base / "cgroup", source.metrics, clock=lambda: now[0])
        source.start(lambda: None)
        try:
            watch: WatchResponse = api.next_watch()
            while len(source.pods()) < count:
                time.sleep(0.01)
            assert source._thread is not None
            watch_start = thread_cpu(source._thread)
            cpu, wall = [], []
            for step in range(scans + 1):
                grow(paths, step)
                index = 1 + step % (count - 1)  # one pod's labels change each interval, then a bookmark
                changed = manifest(index, str(uuid.UUID(int=index + 1)), 10 + 2 * step)
                changed["metadata"]["labels"]["bench-step"] = str(step)
                bookmark = str(11 + 2 * step)
                watch.send({"type": "MODIFIED", "object": changed})
                watch.send({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": bookmark}}})
                while source.resource_version != bookmark:
                    time.sleep(0.001)  # until the watch thread has taken both events
                now[0] = float(step)
                cpu_start, wall_start = time.thread_time(), time.perf_counter()
                agent.scan()
                if step:  # the first scan reads every file once (reconcile); steady state is the rest
                    cpu.append(time.thread_time() - cpu_start)
                    wall.append(time.perf_counter() - wall_start)
            watch_cpu = (thread_cpu(source._thread) - watch_start) / (scans + 1)
        finally:
            source.stop()
        throttled = sum(1 for p in agent.pods.values() if p.throttled())
        if throttled != 3 or not agent.contention.throttled:
            raise SystemExit(
                f"{count} pods: {throttled} throttled under contention, expected 3: not measuring the agent"
            )
        scrape_start = time.process_time()
        exposition = generate_latest(agent.metrics.registry)
        scrape_ms = (time.process_time() - scrape_start) * 1e3
        if exposition.count(b"cgroup_limiter_pod_io_bytes_per_second{") != 2 * count:
            raise SystemExit(f"{count} pods: /metrics lacks per-pod rates")
        scan_s = statistics.mean(cpu)
        return {
            "pods": count,
            "scan_ms": scan_s * 1e3,
            "watch_ms": watch_cpu * 1e3,
            "wall_ms": statistics.median(wall) * 1e3,
            "us_per_pod": (scan_s + watch_cpu) / count * 1e6,
            "scrape_ms": scrape_ms,
        }


def reaction(count: int, new_pods: int, inotify: bool) -> list[float]:
    """Seconds from each new pod cgroup's appearance to its cpu.weight written, the loop running."""
    with fake_node(count) as (base, _, api), contextlib.ExitStack() as stack:
        if not inotify:
            stack.enter_context(mock.patch("cgroup_limiter.wakeup.Inotify", side_effect=OSError(38, "bench: off")))
        source = KubernetesPodSource("node-a", api)
        agent = Agent(config(base), source, base / "cgroup", source.metrics)
        stop = threading.Event()
        loop = threading.Thread(target=agent.run, args=(stop,), name="agent")
        loop.start()
        try:
            watch = api.next_watch()
            while agent.scans == 0:
                time.sleep(0.01)
            latencies = []
            for number in range(new_pods):
                index = count + number
                uid = str(uuid.UUID(int=index + 1))
                watch.send({"type": "ADDED", "object": manifest(index, uid, 1000 + number, new=True)})
                time.sleep(0.05)  # the kubelet creates the cgroup after it has the pod
                appeared = time.monotonic()
                path = make_cgroup(base, index, uid, 0.0)
                while (path / "cpu.weight").read_text() != "50":
                    if time.monotonic() - appeared > 10:
                        raise SystemExit(f"pod {index}: no cpu.weight after 10 s")
                    time.sleep(0.0005)
                latencies.append(time.monotonic() - appeared)
                time.sleep(0.137)  # spread the appearances over the scan interval
        finally:
            stop.set()
            agent.wake()
            loop.join(timeout=10)
        return latencies


def lab_reaction(node_name: str) -> dict[str, Any]:
    """The kernel lab test's threshold-mode scenario up to the throttle, timed; needs a running lab."""
    import subprocess

    from lab_fleet.lab import Lab
    from tests.lab import test_limiter_kernel as scenario

    class Node:
        name = node_name
        lab = Lab.from_environment()

        def run(self, cmd: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
            result = subprocess.run(
                self.lab.ssh_command(self.name, [cmd]), capture_output=True, text=True, timeout=timeout
            )
            if check and result.returncode != 0:
                raise SystemExit(f"{self.name}: `{cmd[:80]}` exited {result.returncode}: {result.stderr}")
            return result

    node = Node()
    with scenario.deployed(node):
        scenario.start(node, "etl", scenario.NOISY_CG, scenario.writer("etl"))
        written = scenario.wait_for(node, f"grep -q 'wbps={scenario.CEILING}' {scenario.NOISY_CG}/io.max", 30)
        elapsed = written - float(node.run(f"cat {scenario.REMOTE}/etl.started").stdout)
    intervals = elapsed / scenario.INTERVAL_S
    return {
        "reaction_s": elapsed,
        "intervals": intervals,
        "k": scenario.TRIGGER,
        "ok": intervals <= scenario.TRIGGER + 1,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scans", type=int, default=20, help="steady-state scans per size")
    parser.add_argument("--new-pods", type=int, default=20, help="pods created for the reaction time")
    parser.add_argument("--lab", metavar="NODE", help="also time the reaction on this running lab node (lab-node-1)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the agent's own log lines would interleave with the table
    results = [scan_cost(count, args.scans if count < 5000 else max(3, args.scans // 4)) for count in SIZES]
    base = results[0]
    print(
        f"{'pods':>6} {'scan cpu ms':>12} {'watch cpu ms':>13} {'wall ms':>8} {'us/pod':>7}"
        f" {'per-pod ratio':>14} {'ms/scrape':>10}"
    )
    for row in results:
        ratio = row["us_per_pod"] / base["us_per_pod"]
        print(
            f"{row['pods']:>6} {row['scan_ms']:>12.2f} {row['watch_ms']:>13.2f} {row['wall_ms']:>8.2f}"
            f" {row['us_per_pod']:>7.1f} {ratio:>14.2f} {row['scrape_ms']:>10.1f}"
        )
    thousand = next(row for row in results if row["pods"] == 1000)
    share = (thousand["scan_ms"] + thousand["watch_ms"]) / 1e3  # one scan per second
    verdict = "meets" if share < TARGET_CORE_SHARE else "MISSES"
    print(
        f"1,000 pods every 1 s, watch included: {share:.2%} of one core"
        f" ({verdict} the target of {TARGET_CORE_SHARE:.0%})"
    )
    failed = share >= TARGET_CORE_SHARE
    for inotify in (True, False):
        latencies = sorted(reaction(1000, args.new_pods, inotify))
        worst = latencies[-1]
        how = "inotify" if inotify else "scan only (inotify off)"
        print(
            f"reaction, 1,000 pods, {how}: cgroup appears -> limit written:"
            f" median {statistics.median(latencies) * 1e3:.1f} ms, max {worst * 1e3:.1f} ms over {len(latencies)} pods"
        )
        if inotify:
            verdict = "meets" if worst <= TARGET_REACTION_S else "MISSES"
            print(f"  ({verdict} the target of {TARGET_REACTION_S:.0f} s)")
            failed |= worst > TARGET_REACTION_S
    if args.lab:
        if shutil.which("ssh") is None:
            raise SystemExit("--lab needs ssh")
        lab = lab_reaction(args.lab)
        verdict = "meets" if lab["ok"] else "MISSES"
        print(
            f"threshold mode on the real kernel: {lab['reaction_s']:.2f} s = {lab['intervals']:.2f} intervals "
            f"({verdict} the target of K+1 = {lab['k'] + 1})"
        )
        failed |= not lab["ok"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
