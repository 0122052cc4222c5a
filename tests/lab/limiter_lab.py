"""The cgroup limiter's image on a lab VM, run as the DaemonSet runs it (used by test_limiter_image.py).

- The image (`make image-limiter`: serving/images, limiter/Containerfile) is built on this machine,
  saved as a docker-archive and streamed into the VM's containerd (`ctr -n k8s.io images import -`).
- `ctr run` gets the confinement, mounts and command of the RENDERED prod DaemonSet
  (deploy/addons/prod/30-cgroup-limiter.yaml), translated by `ctr_run`; the lab adds host networking
  with the metrics port on 127.0.0.1 and a bind-mounted PodList (`--pods-file`) for the API server.
- Its config is the rendered prod ConfigMap's config.yaml with LAB_OVERRIDES (adaptive numbers scaled
  for a VM under TCG emulation, on_exit: remove).
- Pods are transient systemd scopes `cri-containerd-<id>.scope` in pod slices
  (`kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice`), laid out as kubelet's systemd
  driver and containerd make them, with real processes (dd with O_DIRECT on the VM's disk) in them.
- limiter_probe.py, uploaded to the VM, times events there (one SSH round trip takes seconds under TCG).
"""

from __future__ import annotations

import base64
import json
import shlex
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.lab.conftest import LabNode

REPO = Path(__file__).resolve().parents[2]
DAEMONSET_FILE = REPO / "deploy/addons/prod/30-cgroup-limiter.yaml"
TRITON_FILE = REPO / "deploy/serving/prod/manifests/03-rollout-triton.yaml"
PROBE = Path(__file__).with_name("limiter_probe.py")

REMOTE = "/opt/limiter-lab"  # the test's files on the VM: probe, config, pods file, logs, flags
DATA = "/var/tmp/limiter-lab"  # the pods' files on the VM's disk
CONTAINER = "limiter-lab"
NAMESPACE = "k8s.io"  # containerd namespace, the one the kubelet's CRI uses
CTR = f"ctr -n {NAMESPACE}"
CGROUP_ROOT = "/sys/fs/cgroup"
PODS_MOUNT = "/etc/cgroup-limiter-pods"  # where the lab's PodList is mounted (read-only) in the container
PORT = 9501
# Every lab pod UID carries this mark, so a later run finds and stops what an interrupted one left.
UID_MARK = "1ab0-4000-8000"
BASELINE_SLICE = "limiterlab.slice"  # outside kubepods: the device's speed with nobody limited

# Scaled for a VM under TCG (writes reach about 290 MB/s there): the ceiling is far below the device.
INTERVAL_S = 1.0
TRIGGER = 2
CALM = 3
PRESSURE = 5.0  # percent, io.pressure some avg10 of a protected pod
RELEASE = 2.0
CEILING = 8 * 2**20
MIN_RATE = 2_000_000
ADAPTIVE = {
    "enabled": True,
    "mode": "contention",
    "pressure_some_avg10": PRESSURE,
    "release_some_avg10": RELEASE,
    "trigger_intervals": TRIGGER,
    "calm_intervals": CALM,
    "ceiling_bps": CEILING,
    "min_rate_bps": MIN_RATE,
    "max_throttled": 3,
}
LAB_OVERRIDES = {
    "interval_seconds": INTERVAL_S,
    "on_exit": "remove",  # the exit check: SIGTERM leaves no limit behind
    "metrics": {"address": "127.0.0.1", "port": PORT},
}
ANNOTATION = "limiter.gpu-serving.io/"

# containerd 1.6's default capabilities (oci/spec.go, defaultUnixCaps). Its `ctr run` knows no "ALL":
# a DaemonSet's `drop: [ALL]` becomes a --cap-drop for each of these.
CONTAINERD_DEFAULT_CAPS = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
)


class TranslationError(ValueError):
    """The rendered DaemonSet asks for something this lab cannot reproduce with `ctr run`."""


def rendered(path: Path = DAEMONSET_FILE) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the DaemonSet, the node config from its ConfigMap) as rendered for prod."""
    documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    by_kind = {doc["kind"]: doc for doc in documents if doc["kind"] in ("DaemonSet", "ConfigMap")}
    if set(by_kind) != {"DaemonSet", "ConfigMap"}:
        raise TranslationError(f"{path}: expected a DaemonSet and a ConfigMap, found {sorted(by_kind)}")
    return by_kind["DaemonSet"], yaml.safe_load(by_kind["ConfigMap"]["data"]["config.yaml"])


def lab_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The rendered config with the lab's overrides; its adaptive block keeps the rendered keys it does not set."""
    return {**config, **LAB_OVERRIDES, "adaptive": {**(config.get("adaptive") or {}), **ADAPTIVE}}


@dataclass(frozen=True)
class CtrRun:
    """`ctr run` flags and the process, and the host directories they need (hostPath types)."""

    flags: tuple[str, ...]
    command: tuple[str, ...]
    create: tuple[str, ...]  # DirectoryOrCreate
    require: tuple[str, ...]  # Directory
    config_dir: str  # where the ConfigMap's files go on the node


def ctr_run(daemonset: Mapping[str, Any], image_user: str, node_name: str, config_dir: str) -> CtrRun:
    """The DaemonSet's container as containerd 1.6's `ctr run` runs it: user, capabilities, privilege
    escalation, seccomp, read-only root, mounts, env and command. Anything else it asks for is refused."""
    spec = daemonset["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    where = f"DaemonSet {daemonset['metadata']['name']}, container {container['name']}"
    context = container.get("securityContext") or {}
    if context.get("privileged") or spec.get("hostPID") or spec.get("hostIPC"):
        raise TranslationError(f"{where}: privileged/hostPID/hostIPC is not reproduced by this lab")
    if str(context.get("runAsUser")) != image_user:
        raise TranslationError(
            f"{where}: runAsUser {context.get('runAsUser')} differs from the image's USER {image_user} "
            "(ctr 1.6 has no --user flag: the image's user is the one that runs)"
        )
    flags = ["--net-host"]  # lab: the metrics port on the VM's loopback, no CNI
    if context.get("readOnlyRootFilesystem"):
        flags.append("--read-only")
    if context.get("allowPrivilegeEscalation", True):
        flags.append("--allow-new-privs")  # ctr sets no_new_privs unless told
    capabilities = context.get("capabilities") or {}
    dropped = capabilities.get("drop") or []
    caps = CONTAINERD_DEFAULT_CAPS if "ALL" in dropped else tuple(f"CAP_{name}" for name in dropped)
    flags += [f"--cap-drop={cap}" for cap in caps]
    flags += [f"--cap-add=CAP_{name}" for name in capabilities.get("add") or []]
    seccomp = (context.get("seccompProfile") or (spec.get("securityContext") or {}).get("seccompProfile") or {}).get(
        "type"
    )
    if seccomp == "RuntimeDefault":
        flags.append("--seccomp")
    elif seccomp not in (None, "Unconfined"):
        raise TranslationError(f"{where}: seccompProfile {seccomp} is not reproduced by this lab")
    volumes = {volume["name"]: volume for volume in spec.get("volumes") or []}
    create: list[str] = []
    require: list[str] = []
    for mount in container.get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        mode = "ro" if mount.get("readOnly") else "rw"
        target = mount["mountPath"]
        if "hostPath" in volume:
            source = volume["hostPath"]["path"]
            (create if volume["hostPath"].get("type") == "DirectoryOrCreate" else require).append(source)
        elif "configMap" in volume:
            source = config_dir
        elif "emptyDir" in volume:
            flags.append(f"--mount=type=tmpfs,src=tmpfs,dst={target},options=nosuid:nodev:mode=1777")
            continue
        else:
            raise TranslationError(f"{where}: volume {mount['name']} is neither hostPath, configMap nor emptyDir")
        flags.append(f"--mount=type=bind,src={source},dst={target},options=rbind:{mode}")
    flags.append(f"--mount=type=bind,src={REMOTE}/pods,dst={PODS_MOUNT},options=rbind:ro")
    for variable in container.get("env") or []:
        if "value" in variable:
            flags.append(f"--env={variable['name']}={variable['value']}")
        elif (variable.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
            flags.append(f"--env={variable['name']}={node_name}")
        else:
            raise TranslationError(f"{where}: env {variable['name']} has a source this lab does not reproduce")
    command = (*container["command"], *container.get("args", []), "--pods-file", f"{PODS_MOUNT}/pods.json")
    return CtrRun(tuple(flags), command, tuple(create), tuple(require), config_dir)


def lab_uid() -> str:
    return f"{uuid.uuid4().hex[:8]}-{UID_MARK}-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class Pod:
    """A pod as the node sees it: its API object (for the pods file) and its cgroups."""

    name: str
    namespace: str
    qos: str  # burstable or guaranteed
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    uid: str = field(default_factory=lab_uid)
    container_id: str = field(default_factory=lambda: uuid.uuid4().hex + uuid.uuid4().hex)

    @property
    def slice_unit(self) -> str:
        qos = "" if self.qos == "guaranteed" else f"-{self.qos}"
        return f"kubepods{qos}-pod{self.uid.replace('-', '_')}.slice"

    @property
    def cgroup(self) -> str:
        """systemd nests a slice under each dash-separated prefix of its name."""
        parent = "kubepods.slice" if self.qos == "guaranteed" else f"kubepods.slice/kubepods-{self.qos}.slice"
        return f"{CGROUP_ROOT}/{parent}/{self.slice_unit}"

    @property
    def scope_unit(self) -> str:
        return f"cri-containerd-{self.container_id}.scope"

    def manifest(self, node_name: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "uid": self.uid,
                "name": self.name,
                "namespace": self.namespace,
                "labels": dict(self.labels),
                "annotations": dict(self.annotations),
            },
            "spec": {"nodeName": node_name},
            "status": {"phase": "Running", "qosClass": self.qos.capitalize()},
        }


def triton_pod(path: Path = TRITON_FILE) -> Pod:
    """A Triton pod with the labels and annotations of the rendered prod Rollout's pod template (Burstable:
    its requests are below its limits)."""
    rollout = yaml.safe_load(path.read_text())
    template = rollout["spec"]["template"]["metadata"]
    return Pod(
        name="triton-0",
        namespace=rollout["metadata"]["namespace"],
        qos="burstable",
        labels=template.get("labels") or {},
        annotations=template.get("annotations") or {},
    )


def writer(path: str) -> str:
    """A heavy direct-IO writer (64 MiB at a time, no page cache), as long as it runs."""
    return f"while :; do dd if=/dev/zero of={path} bs=1M count=64 oflag=direct conv=notrunc status=none; done"


def flag(name: str) -> str:
    return f"{REMOTE}/{name}.flag"


def switched(name: str) -> str:
    """A pod process that idles, reads (flag NAME-read) or writes (flag NAME-write) with direct IO on
    the VM's disk, as the test switches it: a server that loads a model, or writes, then idles."""
    read = f"dd if={DATA}/model.bin of=/dev/null bs=1M iflag=direct status=none"
    write = f"dd if=/dev/zero of={DATA}/{name}.img bs=1M count=64 oflag=direct conv=notrunc status=none"
    return (
        f"while :; do if [ -e {flag(name + '-read')} ]; then {read};"
        f" elif [ -e {flag(name + '-write')} ]; then {write}; else sleep 0.2; fi; done"
    )


def limits(io_max: str) -> dict[str, dict[str, str]]:
    """io.max as {device: {key: value}} for the keys that limit (not `max`)."""
    found: dict[str, dict[str, str]] = {}
    for line in io_max.splitlines():
        device, *pairs = line.split()
        keys = dict(pair.split("=", 1) for pair in pairs)
        limited = {key: value for key, value in keys.items() if value != "max"}
        if limited:
            found[device] = limited
    return found


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse_metrics(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(samples: Samples, name: str, **labels: str) -> list[float]:
    """Values of `name` whose labels include `labels`."""
    return [value for (got, pairs), value in samples.items() if got == name and set(labels.items()) <= set(pairs)]


def cleanup_script(state_file: str | None) -> str:
    """Stops and removes everything a run of this lab starts on the VM, also what an interrupted run left."""
    images = f"{CTR} images ls -q | grep '^localhost/gpu-serving/limiter:' | xargs -r {CTR} images rm"
    return f"""
{CTR} task kill --signal SIGKILL {CONTAINER} 2>/dev/null
for i in $(seq 20); do {CTR} task ls -q 2>/dev/null | grep -qx {CONTAINER} || break; sleep 0.5; done
{CTR} task delete --force {CONTAINER} 2>/dev/null
{CTR} container delete {CONTAINER} 2>/dev/null
systemctl stop 'kubepods-*pod*_{UID_MARK.replace("-", "_")}_*.slice' {BASELINE_SLICE} 2>/dev/null
{images} >/dev/null 2>&1
rm -rf {REMOTE} {DATA} {state_file or ""}
true
"""


@dataclass
class LimiterLab:
    """The lab VM side: files, the agent's container, pod scopes, and what the probe reads."""

    node: LabNode
    state_file: str | None
    device: str = ""

    def cleanup(self) -> None:
        self.node.run(cleanup_script(self.state_file), check=False, timeout=240)

    def probe(self, *args: str, timeout: float = 120) -> Any:
        result = self.node.run(f"python3 {REMOTE}/probe.py {shlex.join(args)}", timeout=timeout)
        return json.loads(result.stdout)

    def put(self, path: str, data: bytes) -> None:
        """A small file written in one piece (the agent re-reads the pods file when it changes)."""
        encoded = base64.b64encode(data).decode()
        self.node.run(f"echo {encoded} | base64 -d > {path}.new && cat {path}.new > {path} && rm {path}.new")

    def prepare(self, run: CtrRun, config: Mapping[str, Any]) -> None:
        self.cleanup()
        self.node.run("systemctl is-active --quiet containerd || { echo containerd is not running; exit 1; }")
        dirs = " ".join((f"{REMOTE}/pods", run.config_dir, DATA, *run.create))
        missing = "".join(f"test -d {path} || {{ echo missing hostPath {path}; exit 1; }}; " for path in run.require)
        self.node.run(f"{missing}mkdir -p {dirs}")
        self.put(f"{REMOTE}/probe.py", PROBE.read_bytes())
        self.put(f"{run.config_dir}/config.yaml", yaml.safe_dump(dict(config), sort_keys=True).encode())
        self.device = self.probe("device", DATA)["device"]
        # The file a protected "model server" reads (written outside every pod).
        self.node.run(f"dd if=/dev/zero of={DATA}/model.bin bs=1M count=64 oflag=direct status=none")

    def import_image(self, archive: Path) -> None:
        with archive.open("rb") as stream:
            result = subprocess.run(
                self.node.lab.ssh_command(self.node.name, [f"{CTR} images import -"]),
                stdin=stream,
                capture_output=True,
                text=True,
                timeout=900,
            )
        if result.returncode != 0:
            raise AssertionError(f"ctr images import failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")

    def write_pods(self, pods: Sequence[Pod]) -> None:
        podlist = {"apiVersion": "v1", "kind": "PodList", "items": [pod.manifest(self.node.name) for pod in pods]}
        self.put(f"{REMOTE}/pods/pods.json", json.dumps(podlist, indent=1).encode())

    def start_agent(self, tag: str, run: CtrRun, timeout: float = 180) -> float:
        """`ctr run` in the foreground of a detached shell (its exit status lands in agent.rc); seconds to /healthz."""
        ctr = f"{CTR} run --rm {shlex.join(run.flags)} {tag} {CONTAINER} {shlex.join(run.command)}"
        inner = f"{ctr} > {REMOTE}/agent.log 2>&1; echo $? > {REMOTE}/agent.rc"
        self.node.run(f"setsid -f sh -c {shlex.quote(inner)} < /dev/null > /dev/null 2>&1")
        url = f"http://127.0.0.1:{PORT}/healthz"
        exited = f"{REMOTE}/agent.rc"
        ready = self.probe("ready", "--url", url, "--exited", exited, "--timeout", str(timeout), timeout=timeout + 60)
        ready = ready["ready"]
        if ready is None:
            raise AssertionError(f"the agent's /healthz did not answer 200 within {timeout} s:\n{self.agent_log()}")
        return float(ready)

    def agent_log(self) -> str:
        return self.node.run(f"cat {REMOTE}/agent.log {REMOTE}/agent.rc", check=False).stdout

    def agent_status(self) -> dict[str, str]:
        """The agent process's /proc status lines and the options of its root, /sys and cgroup mounts."""
        script = (
            f'pid=$({CTR} task ls | awk \'$1 == "{CONTAINER}" {{print $2}}\'); test -n "$pid" || exit 1;'
            " grep -E '^(Uid|Gid|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/$pid/status;"
            ' awk \'$5 == "/" || $5 == "/sys" || $5 == "/sys/fs/cgroup" {print "mount" $5 ":", $6}\''
            " /proc/$pid/mountinfo"
        )
        status: dict[str, str] = {}
        for line in self.node.run(script).stdout.splitlines():
            key, value = line.split(":", 1)
            status[key] = value.split()[0] if key.startswith("mount") else " ".join(value.split())
        return status

    def start(self, pod: Pod, command: str) -> None:
        """The pod's container: `command` in a transient scope in the pod's slice, as containerd's runc makes it."""
        self.node.run(self.launch(pod, command))
        self.check_scope(pod)

    def launch(self, pod: Pod, command: str) -> str:
        """The shell line that starts the pod's scope in the background."""
        return f"setsid -f sh -c {shlex.quote(self.scope_command(pod, command))} < /dev/null > /dev/null 2>&1"

    def check_scope(self, pod: Pod) -> None:
        """The scope's cgroup is where kubelet's systemd driver and containerd put a container of this pod."""
        scope = f"{pod.cgroup}/{pod.scope_unit}"
        self.node.run(
            f"for i in $(seq 150); do test -d {scope} && break; sleep 0.2; done;"
            f' test "$(systemctl show -P ControlGroup {pod.scope_unit})" = {scope.removeprefix(CGROUP_ROOT)}'
            f" || {{ echo 'no scope at {scope}:'; systemctl status {pod.scope_unit};"
            f" cat {REMOTE}/{pod.name}.log; exit 1; }}"
        )

    def scope_command(self, pod: Pod, command: str) -> str:
        return (
            f"systemd-run --quiet --collect --scope --unit={pod.scope_unit} --slice={pod.slice_unit}"
            f" -p IOAccounting=yes -p CPUAccounting=yes sh -c {shlex.quote(command)}"
            f" > {REMOTE}/{pod.name}.log 2>&1 < /dev/null"
        )

    def stop(self, pod: Pod) -> None:
        """The pod's container ends (its scope stops); the pod's slice stays, as a running pod's does."""
        self.node.run(f"systemctl stop {pod.scope_unit}", check=False, timeout=120)

    def baseline(self, seconds: float) -> float:
        """The disk's write speed (B/s) with nobody limited: the writer in a scope outside kubepods."""
        scope = "limiterlab-baseline.scope"
        command = f"systemd-run --quiet --collect --scope --unit={scope} --slice={BASELINE_SLICE} -p IOAccounting=yes"
        self.node.run(
            f"setsid -f {command} sh -c {shlex.quote(writer(DATA + '/baseline.img'))} < /dev/null > /dev/null 2>&1;"
            f" for i in $(seq 150); do test -d {CGROUP_ROOT}/{BASELINE_SLICE}/{scope} && break; sleep 0.2; done"
        )
        try:
            self.node.run("sleep 1")
            return float(self.measure([f"{CGROUP_ROOT}/{BASELINE_SLICE}/{scope}"], seconds)[0]["wbps"])
        finally:
            self.node.run(f"systemctl stop {scope}", check=False, timeout=120)

    def measure(self, cgroups: Sequence[str], seconds: float) -> list[dict[str, Any]]:
        found = self.probe("measure", "--device", self.device, "--seconds", str(seconds), *cgroups)
        return [found[cgroup] for cgroup in cgroups]

    def metrics(self) -> Samples:
        answer = self.probe("get", "--url", f"http://127.0.0.1:{PORT}/metrics")
        assert answer["status"] == 200, f"/metrics answered {answer['status']}: {answer['body'][:500]}"
        return parse_metrics(answer["body"])

    def stop_agent(self, timeout: float = 60) -> str:
        """SIGTERM to the container's process, as the kubelet stops a pod; the exit status `ctr run` reported."""
        self.node.run(f"{CTR} task kill --signal SIGTERM {CONTAINER}")
        self.node.run(
            f"for i in $(seq {int(timeout * 5)}); do test -s {REMOTE}/agent.rc && exit 0; sleep 0.2; done; exit 1"
        )
        return self.node.run(f"cat {REMOTE}/agent.rc").stdout.strip()
