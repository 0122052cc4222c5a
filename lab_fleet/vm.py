"""qemu VMs of the lab: per-node disks and seeds, accelerator choice, start, stop, SSH readiness."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from lab_fleet.image import Image

QEMU = "qemu-system-x86_64"


class LabError(RuntimeError):
    pass


@dataclass(frozen=True)
class Node:
    """One lab VM. Everything about it lives in `directory` under the lab's state dir."""

    name: str
    directory: Path

    @property
    def disk(self) -> Path:
        return self.directory / "disk.qcow2"

    @property
    def seed(self) -> Path:
        return self.directory / "seed.img"

    @property
    def host_key(self) -> Path:
        return self.directory / "ssh_host_ed25519_key"

    @property
    def pidfile(self) -> Path:
        return self.directory / "qemu.pid"

    @property
    def qmp_socket(self) -> Path:
        return self.directory / "qmp.sock"

    @property
    def serial_log(self) -> Path:
        return self.directory / "serial.log"

    @property
    def port_file(self) -> Path:
        return self.directory / "ssh.port"

    def pid(self) -> int | None:
        """The qemu pid if that process is alive and really is this node's qemu."""
        try:
            pid = int(self.pidfile.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return None
        return pid if str(self.disk).encode() in cmdline else None

    def port(self) -> int | None:
        try:
            return int(self.port_file.read_text())
        except (OSError, ValueError):
            return None


def qemu_processes(state_dir: Path) -> list[int]:
    """Every qemu process whose command line points into this lab's state dir."""
    marker = str(state_dir.resolve()).encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith(QEMU.encode()) and marker in cmdline:
            found.append(int(proc.name))
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def ensure_ssh_key(state_dir: Path) -> Path:
    key = state_dir / "id_ed25519"
    if not key.exists():
        state_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpu-serving-lab", "-f", str(key)], check=True
        )
    return key


def prepare(node: Node, image: Image, client_key: Path, backing: Path | None = None) -> None:
    """Create the node's copy-on-write disk (over the base image, or over `backing`, a qcow2 whose own
    backing is the base image: a converged node's disk), its host key and its seed disk, once."""
    node.directory.mkdir(parents=True, exist_ok=True)
    if not node.disk.exists():
        base = ["-F", "qcow2", "-b", str(backing)] if backing else ["-F", "raw", "-b", str(image.rootfs)]
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", *base, str(node.disk)], check=True)
    if not node.host_key.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", node.name, "-f", str(node.host_key)], check=True
        )
    if not node.seed.exists():
        with tempfile.TemporaryDirectory() as tmp:
            seed = Path(tmp)
            shutil.copy2(node.host_key, seed / "ssh_host_ed25519_key")
            shutil.copy2(node.host_key.with_suffix(".pub"), seed / "ssh_host_ed25519_key.pub")
            shutil.copy2(client_key.with_suffix(".pub"), seed / "authorized_keys")
            (seed / "hostname").write_text(node.name + "\n")
            subprocess.run(
                ["mkfs.ext4", "-q", "-F", "-d", tmp, "-L", "labseed", str(node.seed), "8M"],
                check=True,
                stdout=subprocess.DEVNULL,
            )


def kvm_works(image: Image, cache_dir: Path) -> bool:
    """Boot the kernel under KVM with no root disk: a working KVM panics in seconds.

    /dev/kvm opening is not enough (nested KVM here opens it and then hangs or aborts with
    'failed to set MSR'), so the answer comes from a real boot and is cached per host.
    """
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    version = subprocess.run([QEMU, "--version"], capture_output=True, text=True, check=False).stdout.split("\n")[0]
    probe_key = f"{os.uname().release}|{version}|{image.directory.name}"
    cache = cache_dir / "accel.json"
    with contextlib.suppress(OSError, ValueError):
        known = json.loads(cache.read_text())
        if known.get("key") == probe_key:
            return bool(known["kvm"])
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "probe.log"
        cmd = [
            QEMU, "-accel", "kvm", "-cpu", "host", "-m", "256", "-kernel", str(image.kernel),
            "-append", "console=ttyS0 panic=-1", "-no-reboot", "-display", "none", "-monitor", "none",
            "-serial", f"file:{log}",
        ]  # fmt: skip
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(cmd, capture_output=True, timeout=20, check=False)
        text = log.read_text(errors="replace") if log.exists() else ""
    works = "Kernel panic" in text
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"key": probe_key, "kvm": works}))
    return works


def choose_accel(image: Image, cache_dir: Path) -> str:
    forced = os.environ.get("LAB_ACCEL")
    if forced in ("kvm", "tcg"):
        return forced
    return "kvm" if kvm_works(image, cache_dir) else "tcg"


def start(node: Node, image: Image, accel: str, memory_mb: int, cpus: int) -> int:
    """Start the node's qemu in the background; returns the SSH port on 127.0.0.1."""
    port = node.port()
    if port is None or not _port_is_free(port):
        port = free_port()
    node.port_file.write_text(str(port))
    node.qmp_socket.unlink(missing_ok=True)
    cpu = ["-accel", "kvm", "-cpu", "host"] if accel == "kvm" else ["-accel", "tcg", "-cpu", "max"]
    cmd = [
        QEMU, "-name", node.name, *cpu, "-m", str(memory_mb), "-smp", str(cpus),
        "-kernel", str(image.kernel), "-initrd", str(image.initrd),
        "-append", "root=/dev/vda rw console=ttyS0 net.ifnames=0",
        "-drive", f"file={node.disk},format=qcow2,if=virtio,cache=unsafe",
        "-drive", f"file={node.seed},format=raw,if=virtio,readonly=on",
        "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{port}-:22", "-device", "virtio-net-pci,netdev=n0",
        "-device", "virtio-rng-pci",
        "-display", "none", "-monitor", "none", "-serial", f"file:{node.serial_log}",
        "-qmp", f"unix:{node.qmp_socket},server=on,wait=off",
        "-daemonize", "-pidfile", str(node.pidfile),
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise LabError(f"{node.name}: qemu failed to start: {result.stderr.strip()}")
    return port


def qmp(node: Node, command: str) -> None:
    """Send one QMP command (system_powerdown, quit) to the node's qemu."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(str(node.qmp_socket))
        reader = sock.makefile("r")
        reader.readline()  # greeting
        for message in ({"execute": "qmp_capabilities"}, {"execute": command}):
            sock.sendall(json.dumps(message).encode() + b"\n")
            with contextlib.suppress(OSError):
                reader.readline()


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.2)
    return not Path(f"/proc/{pid}").exists()


def stop(node: Node, graceful: bool, timeout: float = 90) -> None:
    """ACPI power-down (graceful) or pull the plug; SIGKILL if qemu does not go."""
    pid = node.pid()
    if pid is None:
        return
    with contextlib.suppress(OSError):
        qmp(node, "system_powerdown" if graceful else "quit")
    if not _wait_gone(pid, timeout if graceful else 10):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, 10)
    node.pidfile.unlink(missing_ok=True)


# OpenSSH's ConnectTimeout also bounds the wait for the server's banner. A TCG guest sharing two
# cores with another VM and other work took up to 38 s to answer a connection (issue 18), so
# 5 s turned a slow guest into a failed command. The boot probe keeps a shorter one: before the
# guest's network is up a probe can hang for the whole timeout, and a failed probe is retried.
SSH_CONNECT_TIMEOUT_S = 60
SSH_PROBE_TIMEOUT_S = 15


def ssh_base(node: Node, state_dir: Path, port: int, connect_timeout: int = SSH_CONNECT_TIMEOUT_S) -> list[str]:
    return [
        "ssh", "-i", str(state_dir / "id_ed25519"), "-p", str(port),
        "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
        "-o", f"UserKnownHostsFile={state_dir / 'known_hosts'}", "-o", "StrictHostKeyChecking=yes",
        "-o", f"HostKeyAlias={node.name}", "-o", f"ConnectTimeout={connect_timeout}", "-o", "LogLevel=ERROR",
    ]  # fmt: skip


def wait_for_ssh(node: Node, state_dir: Path, port: int, timeout: float) -> float:
    """Poll until `ssh root@node true` works; returns seconds waited. Fails fast if qemu died."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if node.pid() is None:
            tail = node.serial_log.read_text(errors="replace").splitlines()[-15:] if node.serial_log.exists() else []
            raise LabError(f"{node.name}: qemu exited during boot; serial log tail:\n" + "\n".join(tail))
        try:
            probe = subprocess.run(
                [*ssh_base(node, state_dir, port, SSH_PROBE_TIMEOUT_S), "root@127.0.0.1", "true"],
                capture_output=True,
                timeout=SSH_PROBE_TIMEOUT_S + 30,
                check=False,
            )
        except subprocess.TimeoutExpired:
            continue  # a starved guest answers late: keep polling until `timeout`
        if probe.returncode == 0:
            return time.monotonic() - started
        time.sleep(1)
    raise LabError(f"{node.name}: no SSH on 127.0.0.1:{port} after {timeout:.0f}s; see {node.serial_log}")
