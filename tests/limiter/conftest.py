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

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for name, number in (("vda", DISK), ("nvme0n1", "259:0")):
            (self.sysfs / "dev/block" / number).mkdir(parents=True, exist_ok=True)
            (self.sysfs / "class/block" / name).mkdir(parents=True, exist_ok=True)
            (self.sysfs / "class/block" / name / "dev").write_text(number + "\n")
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
    ) -> Path:
        path = self.cgroup_path(uid, qos, driver)
        path.mkdir(parents=True)
        (path / "io.stat").write_text("")
        (path / "io.max").write_text("")
        (path / "cpu.weight").write_text("39\n")  # what the kubelet writes for 1 CPU of requests
        (path / "cpu.max").write_text("max 100000\n")
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
        return path

    def write_pods(self) -> None:
        self.pods_file.write_text(json.dumps({"kind": "PodList", "items": self.pods}))

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
            "protect": [{"labels": {"app.kubernetes.io/name": "triton"}}],
            "adaptive": {
                "threshold_bps": "100M",
                "ceiling_bps": "50M",
                "release_bps": "25M",
                "trigger_intervals": 3,
                "calm_intervals": 4,
            },
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
