"""Cost of one limiter scan at 100, 1,000 and 5,000 pod cgroups on a fake tree (target: 1,000 pods
scanned every second use under 2% of one core), and with --lab the reaction time on the lab
VM's real kernel, from a burst's start to io.max being written (target: at most K+1 intervals).

The fake tree (under /dev/shm when it exists: in memory, like cgroupfs) has both kubelet
layouts; every pod's io.stat grows between scans and one pod in ten writes above the adaptive
threshold, so the scans measure the rate, trigger and write paths, not just reads. CPU time
is the process's (time.process_time) over every scan of one run; the ratios compare the cost
per pod between sizes in that same run. ms/scrape is one rendering of /metrics (paid once per
Prometheus scrape, not per scan: per-pod rates are collected at scrape time).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "limiter")]

from cgroup_limiter.agent import Agent  # noqa: E402
from cgroup_limiter.config import parse_config  # noqa: E402
from cgroup_limiter.pods import FilePodSource  # noqa: E402
from prometheus_client import generate_latest  # noqa: E402

SIZES = (100, 1000, 5000)
TARGET_CORE_SHARE = 0.02
DEVICE = "254:0"
MB = 1_000_000


def build(base: Path, count: int) -> tuple[list[Path], Path, Path]:
    """`count` pod cgroups (half cgroupfs, half systemd, across QoS classes), a sysfs, a pods file."""
    (base / "sys/dev/block" / DEVICE).mkdir(parents=True)
    paths, items = [], []
    for index in range(count):
        uid = str(uuid.UUID(int=index + 1))
        qos = ("guaranteed", "burstable", "besteffort")[index % 3]
        if index % 2:
            top = base / "cgroup/kubepods.slice"
            unit = uid.replace("-", "_")
            path = top / (
                f"kubepods-pod{unit}.slice"
                if qos == "guaranteed"
                else f"kubepods-{qos}.slice/kubepods-{qos}-pod{unit}.slice"
            )
        else:
            top = base / "cgroup/kubepods"
            path = top / (f"pod{uid}" if qos == "guaranteed" else f"{qos}/pod{uid}")
        path.mkdir(parents=True)
        for name, body in (("io.stat", ""), ("io.max", ""), ("cpu.weight", "100\n"), ("cpu.max", "max 100000\n")):
            (path / name).write_text(body)
        paths.append(path)
        labels = {"app.kubernetes.io/name": "triton"} if index % 50 == 0 else {"app": "batch"}
        annotations = {"limiter.gpu-serving.io/cpu-weight": "50"} if index % 4 == 0 else {}
        items.append(
            {
                "metadata": {
                    "uid": uid,
                    "name": f"pod-{index}",
                    "namespace": "bench",
                    "labels": labels,
                    "annotations": annotations,
                }
            }
        )
    pods_file = base / "pods.json"
    pods_file.write_text(json.dumps({"kind": "PodList", "items": items}))
    return paths, base / "sys", pods_file


def grow(paths: list[Path], step: int) -> None:
    for index, path in enumerate(paths):
        written = step * (150 if index % 10 == 0 else 5) * MB
        (path / "io.stat").write_text(
            f"{DEVICE} rbytes={step * MB} wbytes={written} rios={step} wios={step} dbytes=0 dios=0\n"
        )


def scan_cost(count: int, scans: int) -> dict[str, float]:
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(prefix="bench-limiter-", dir=shm if shm.is_dir() else None) as tmp:
        paths, sysfs, pods_file = build(Path(tmp), count)
        config = parse_config(
            {
                "sysfs_root": str(sysfs),
                "state_file": f"{tmp}/state.json",
                "protect": [{"labels": {"app.kubernetes.io/name": "triton"}}],
                "adaptive": {
                    "threshold_bps": "100M",
                    "ceiling_bps": "50M",
                    "release_bps": "25M",
                    "trigger_intervals": 3,
                },
            },
            "bench-config",
        )
        now = [0.0]
        agent = Agent(config, FilePodSource(pods_file), Path(tmp) / "cgroup", clock=lambda: now[0])
        cpu, wall = [], []
        for step in range(scans + 1):
            grow(paths, step)
            now[0] = float(step)
            cpu_start, wall_start = time.process_time(), time.perf_counter()
            agent.scan()
            if step:  # the first scan reads every file once (reconcile); steady state is the rest
                cpu.append(time.process_time() - cpu_start)
                wall.append(time.perf_counter() - wall_start)
        throttled = sum(1 for pod in agent.pods.values() if any(t.throttled for t in pod.triggers.values()))
        expected = len([i for i in range(count) if i % 10 == 0 and i % 50 != 0])
        if throttled != expected:
            raise SystemExit(
                f"{count} pods: {throttled} throttled, expected {expected}: the bench is not measuring the agent"
            )
        cpu_s = statistics.mean(cpu)
        scrape_start = time.process_time()
        exposition = generate_latest(agent.metrics.registry)
        scrape_ms = (time.process_time() - scrape_start) * 1e3
        if exposition.count(b"cgroup_limiter_pod_io_bytes_per_second{") != 2 * count:
            raise SystemExit(f"{count} pods: /metrics lacks per-pod rates")
        return {
            "pods": count,
            "cpu_ms": cpu_s * 1e3,
            "wall_ms": statistics.median(wall) * 1e3,
            "us_per_pod": cpu_s / count * 1e6,
            "scrape_ms": scrape_ms,
        }


def lab_reaction(node_name: str) -> dict[str, Any]:
    """The lab test's scenario up to the throttle, timed; needs a running lab (scripts/lab status)."""
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
        reaction = written - float(node.run(f"cat {scenario.REMOTE}/etl.started").stdout)
    intervals = reaction / scenario.INTERVAL_S
    return {
        "reaction_s": reaction,
        "intervals": intervals,
        "k": scenario.TRIGGER,
        "ok": intervals <= scenario.TRIGGER + 1,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scans", type=int, default=20, help="steady-state scans per size")
    parser.add_argument("--lab", metavar="NODE", help="also time the reaction on this running lab node (lab-node-1)")
    args = parser.parse_args()
    results = [scan_cost(count, args.scans if count < 5000 else max(3, args.scans // 4)) for count in SIZES]
    base = results[0]
    print(f"{'pods':>6} {'cpu ms/scan':>12} {'wall ms/scan':>13} {'us/pod':>8} {'per-pod ratio':>14} {'ms/scrape':>10}")
    for row in results:
        ratio = row["us_per_pod"] / base["us_per_pod"]
        print(
            f"{row['pods']:>6} {row['cpu_ms']:>12.2f} {row['wall_ms']:>13.2f} {row['us_per_pod']:>8.1f}"
            f" {ratio:>14.2f} {row['scrape_ms']:>10.1f}"
        )
    thousand = next(row for row in results if row["pods"] == 1000)
    share = thousand["cpu_ms"] / 1e3  # one scan per second
    verdict = "meets" if share < TARGET_CORE_SHARE else "MISSES"
    print(f"1,000 pods every 1 s: {share:.2%} of one core ({verdict} the target of {TARGET_CORE_SHARE:.0%})")
    failed = share >= TARGET_CORE_SHARE
    if args.lab:
        if shutil.which("ssh") is None:
            raise SystemExit("--lab needs ssh")
        lab = lab_reaction(args.lab)
        verdict = "meets" if lab["ok"] else "MISSES"
        print(
            f"reaction on the real kernel: {lab['reaction_s']:.2f} s = {lab['intervals']:.2f} intervals "
            f"({verdict} the target of K+1 = {lab['k'] + 1})"
        )
        failed |= not lab["ok"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
