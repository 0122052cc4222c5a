"""A fake node for the limiter: a cgroup tree and a sysfs in a temporary directory, and a pods file."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

LIMITER = Path(__file__).resolve().parents[2] / "limiter"
sys.path.insert(0, str(LIMITER))

from cgroup_limiter.agent import Agent  # noqa: E402
from cgroup_limiter.config import NodeConfig, parse_config  # noqa: E402
from cgroup_limiter.pods import FilePodSource  # noqa: E402

DISK = "254:0"
MB = 1_000_000
# The old fixed-threshold behaviour (mode: threshold), as the agent's first tests pinned it.
THRESHOLD_MODE = {
    "mode": "threshold",
    "threshold_bps": "100M",
    "ceiling_bps": "50M",
    "release_bps": "25M",
    "trigger_intervals": 3,
    "calm_intervals": 4,
}
# Contention mode: throttle under protected pods' IO pressure above 10% for 2 scans, lift below 2% for 3.
CONTENTION_MODE = {
    "mode": "contention",
    "pressure_some_avg10": 10.0,
    "release_some_avg10": 2.0,
    "trigger_intervals": 2,
    "calm_intervals": 3,
    "ceiling_bps": "50M",
    "min_rate_bps": "1M",
    "max_throttled": 2,
}


def psi(some_avg10: float = 0.0, total_us: int = 0) -> str:
    """A pressure file as the kernel prints it."""
    return (
        f"some avg10={some_avg10:.2f} avg60=0.00 avg300=0.00 total={total_us}\n"
        f"full avg10={some_avg10 / 2:.2f} avg60=0.00 avg300=0.00 total={total_us // 2}\n"
    )


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeNode:
    """Pod cgroups with the interface files the kernel shows, in the kubelet's layouts."""

    base: Path
    clock: Clock = field(default_factory=Clock)
    pods: list[dict] = field(default_factory=list)

    @property
    def root(self) -> Path:
        return self.base / "cgroup"

    @property
    def sysfs(self) -> Path:
        return self.base / "sys"

    @property
    def pods_file(self) -> Path:
        return self.base / "pods.json"

    @property
    def node_pressure(self) -> Path:
        """Stands in for /proc/pressure/io."""
        return self.base / "proc-pressure-io"

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for name, number in (("vda", DISK), ("nvme0n1", "259:0")):
            (self.sysfs / "dev/block" / number).mkdir(parents=True, exist_ok=True)
            (self.sysfs / "class/block" / name).mkdir(parents=True, exist_ok=True)
            (self.sysfs / "class/block" / name / "dev").write_text(number + "\n")
        self.node_pressure.write_text(psi())
        self.write_pods()

    def cgroup_path(self, uid: str, qos: str, driver: str) -> Path:
        if driver == "systemd":
            unit = uid.replace("-", "_")
            top = self.root / "kubepods.slice"
            if qos == "guaranteed":
                return top / f"kubepods-pod{unit}.slice"
            return top / f"kubepods-{qos}.slice" / f"kubepods-{qos}-pod{unit}.slice"
        top = self.root / "kubepods"
        return top / f"pod{uid}" if qos == "guaranteed" else top / qos / f"pod{uid}"

    def add_pod(
        self,
        name: str,
        uid: str,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        qos: str = "burstable",
        driver: str = "cgroupfs",
        namespace: str = "default",
        listed: bool = True,
    ) -> Path:
        """A pod cgroup appears whole, its interface files in it (as mkdir on cgroupfs makes
        them): built aside, then renamed into place. `listed`: the pod source knows the pod."""
        path = self.cgroup_path(uid, qos, driver)
        path.parent.mkdir(parents=True, exist_ok=True)
        aside = self.base / f"new-{uid}"
        aside.mkdir()
        (aside / "io.stat").write_text("")
        (aside / "io.max").write_text("")
        (aside / "io.pressure").write_text(psi())
        (aside / "cpu.weight").write_text("39\n")  # what the kubelet writes for 1 CPU of requests
        (aside / "cpu.max").write_text("max 100000\n")
        if listed:
            self.list_pod(name, uid, labels, annotations, namespace)
        aside.rename(path)
        return path

    def list_pod(
        self,
        name: str,
        uid: str,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        namespace: str = "default",
    ) -> None:
        self.pods.append(
            {
                "metadata": {
                    "uid": uid,
                    "name": name,
                    "namespace": namespace,
                    "labels": labels or {},
                    "annotations": annotations or {},
                },
                "spec": {"nodeName": "node-a"},
            }
        )
        self.write_pods()

    def write_pods(self) -> None:
        """Atomically, as kubectl's output redirected to a file and renamed would be."""
        partial = self.base / "pods.json.partial"
        partial.write_text(json.dumps({"kind": "PodList", "items": self.pods}))
        partial.rename(self.pods_file)

    def set_pressure(self, some_avg10: float, path: Path | None = None) -> None:
        """A pod's io.pressure, or (path None) the node's."""
        (self.node_pressure if path is None else path / "io.pressure").write_text(psi(some_avg10))

    def add_bytes(self, path: Path, rbytes: int = 0, wbytes: int = 0, device: str = DISK) -> None:
        """Grow the device's io.stat counters, as IO in the cgroup would."""
        lines = {}
        for line in (path / "io.stat").read_text().splitlines():
            fields = dict(item.split("=") for item in line.split()[1:])
            lines[line.split()[0]] = fields
        fields = lines.setdefault(device, {"rbytes": "0", "wbytes": "0", "rios": "0", "wios": "0"})
        fields["rbytes"] = str(int(fields["rbytes"]) + rbytes)
        fields["wbytes"] = str(int(fields["wbytes"]) + wbytes)
        fields["dbytes"], fields["dios"] = "0", "0"
        text = "".join(f"{dev} " + " ".join(f"{k}={v}" for k, v in f.items()) + "\n" for dev, f in lines.items())
        (path / "io.stat").write_text(text)

    def config(self, **overrides: object) -> NodeConfig:
        raw: dict = {
            "interval_seconds": 1,
            "sysfs_root": str(self.sysfs),
            "state_file": str(self.base / "state.json"),
            "node_pressure_file": str(self.node_pressure),
            "protect": [{"labels": {"app.kubernetes.io/name": "triton"}}],
            "adaptive": THRESHOLD_MODE,
        }
        raw.update(overrides)
        return parse_config(raw, "test-config")

    def agent(self, **overrides: object) -> Agent:
        return Agent(self.config(**overrides), FilePodSource(self.pods_file, "node-a"), self.root, clock=self.clock)

    def tick(self, agent: Agent, seconds: float = 1.0) -> None:
        self.clock.now += seconds
        agent.scan()


@pytest.fixture
def node(tmp_path: Path) -> FakeNode:
    return FakeNode(tmp_path)


def sample(agent: Agent, name: str, **labels: str) -> float | None:
    return agent.metrics.registry.get_sample_value(name, labels or None)
