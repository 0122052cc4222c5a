"""What the compliance checks judge, read on the node in one go (one remote command per node).

Runs ON the node: standard library only, Python 3.9 compatible (see tests/compliance/remote.py
for how it is sent). `collect(spec)` returns a JSON-ready mapping; reading never changes the node.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from typing import Any

CGROUP_ROOT = "/sys/fs/cgroup"


def _run(*argv: str, timeout: float = 30) -> dict[str, Any]:
    if shutil.which(argv[0]) is None:
        return {"rc": 127, "stdout": "", "stderr": f"{argv[0]}: command not found"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr.strip()}


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def os_release() -> dict[str, str]:
    fields = {}
    for line in (_read("/etc/os-release") or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key] = value.strip().strip('"')
    return fields


def packages(names: list[str]) -> dict[str, Any]:
    """{name: {version, selection}} of the installed ones: dpkg (selection: hold/install) or rpm (versionlock)."""
    found: dict[str, dict[str, str]] = {}
    if shutil.which("dpkg-query"):
        out = _run("dpkg-query", "-W", "-f=${Package} ${Version} ${db:Status-Want} ${db:Status-Status}\n", *names)
        for line in out["stdout"].splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[3] == "installed":
                found[parts[0]] = {"version": parts[1], "selection": parts[2]}
        return {"manager": "dpkg", "installed": found}
    out = _run("rpm", "-q", "--qf", "%{NAME} %{VERSION}-%{RELEASE}\n", *names)
    locks = _read("/etc/dnf/plugins/versionlock.list") or ""
    for line in out["stdout"].splitlines():
        parts = line.split()
        if len(parts) == 2:
            name, version = parts
            locked = any(lock.strip().startswith(f"{name}-") and version in lock for lock in locks.splitlines())
            found[name] = {"version": version, "selection": "versionlock" if locked else "install"}
    return {"manager": "rpm", "installed": found}


def cgroup() -> dict[str, Any]:
    fs_type = None
    for line in (_read("/proc/self/mounts") or "").splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[1] == CGROUP_ROOT:
            fs_type = parts[2]
    controllers = _read(os.path.join(CGROUP_ROOT, "cgroup.controllers"))
    return {"fs_type": fs_type, "controllers": controllers.split() if controllers is not None else None}


def _pod_ip(pod_label: str) -> tuple[str | None, str]:
    """The IP of the node's ready pod labelled app.kubernetes.io/name=<pod_label>, through crictl."""
    pods = _run("crictl", "pods", "--label", f"app.kubernetes.io/name={pod_label}", "--state", "ready", "-q")
    if pods["rc"] != 0:
        return None, f"crictl pods failed: {pods['stderr'] or pods['stdout']}"
    ids = pods["stdout"].split()
    if not ids:
        return None, f"no ready pod labelled app.kubernetes.io/name={pod_label} on this node"
    inspect = _run("crictl", "inspectp", ids[0])
    try:
        return json.loads(inspect["stdout"])["status"]["network"]["ip"], ""
    except (ValueError, KeyError, TypeError):
        return None, f"crictl inspectp {ids[0]} gave no pod IP: {inspect['stderr']}"


def metric_names(body: str) -> list[str]:
    """The sample names of a Prometheus text exposition."""
    return sorted({line.split("{")[0].split()[0] for line in body.splitlines() if line.strip() and line[0] != "#"})


def metrics(target: dict[str, Any]) -> dict[str, Any]:
    ip, why = _pod_ip(target["pod_label"])
    if ip is None:
        return {"url": None, "error": why}
    url = f"http://{ip}:{target['port']}{target['path']}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return {"url": url, "error": str(exc)}
    return {"url": url, "error": None, "metric_names": metric_names(body)}


def collect(spec: dict[str, Any], probe: Any = None) -> dict[str, Any]:
    """One node's facts. `probe` is gpu_health.probe (sent along); None leaves the GPU part to the caller."""
    kernel = os.uname().release
    return {
        "os_release": os_release(),
        "kernel": kernel,
        "packages": packages(spec["packages"]),
        "files": {path: _read(path) for path in spec["files"]},
        "cgroup": cgroup(),
        "services": {name: _run("systemctl", "is-active", name)["stdout"].strip() for name in spec["services"]},
        # The effective config: the main file merged with its imports, as containerd reads it.
        "containerd_config": _run("containerd", "config", "dump"),
        "modinfo": _run("modinfo", "-k", kernel, "-F", "version", spec["kernel_module"]),
        "dkms": _run("dkms", "status"),
        "gpu": probe.snapshot() if probe is not None else None,
        "metrics": {target["name"]: metrics(target) for target in spec["metrics"]},
    }
