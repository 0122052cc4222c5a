"""The lab as a whole: its nodes, the inventory it writes, and the commands of scripts/lab."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from lab_fleet import image as lab_image
from lab_fleet import vm

REPO_ROOT = Path(__file__).resolve().parents[1]
NODE_PREFIX = "lab-node-"


@dataclass(frozen=True)
class Lab:
    state_dir: Path
    cache_dir: Path
    inventory: Path

    @classmethod
    def from_environment(cls) -> Lab:
        cache = os.environ.get("LAB_CACHE_DIR") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gpu-serving-lab"
        )
        return cls(
            state_dir=Path(os.environ.get("LAB_STATE_DIR", REPO_ROOT / ".lab")).resolve(),
            cache_dir=Path(cache),
            inventory=Path(os.environ.get("LAB_INVENTORY", REPO_ROOT / "inventories/lab/hosts.yml")),
        )

    def node(self, name: str) -> vm.Node:
        return vm.Node(name, self.state_dir / "nodes" / name)

    def nodes(self) -> list[vm.Node]:
        root = self.state_dir / "nodes"
        names = sorted(p.name for p in root.iterdir()) if root.is_dir() else []
        return [self.node(name) for name in sorted(names, key=lambda n: int(n.removeprefix(NODE_PREFIX)))]

    def known_node(self, name: str) -> vm.Node:
        node = self.node(name)
        if not node.directory.is_dir():
            known = ", ".join(n.name for n in self.nodes()) or "none; run `scripts/lab up`"
            raise vm.LabError(f"no lab node {name!r} (known: {known})")
        return node

    # --- commands -------------------------------------------------------------------------

    def up(
        self, count: int, memory_mb: int, cpus: int, timeout: float, backing: Path | None = None
    ) -> dict[str, float]:
        """Boot nodes 1..count (reusing disks that exist; new disks over `backing` when given, a
        converged node's disk from lab_fleet.converged); returns timings in seconds."""
        if count < 1:
            raise vm.LabError(f"--nodes must be at least 1, got {count}")
        if shutil.which(vm.QEMU) is None:
            raise vm.LabError(f"{vm.QEMU} is not installed; run `make deps` (Debian package qemu-system-x86)")
        started = time.monotonic()
        image, build_seconds = lab_image.ensure(self.cache_dir)
        key = vm.ensure_ssh_key(self.state_dir)
        accel = vm.choose_accel(image, self.cache_dir)
        wanted = [self.node(f"{NODE_PREFIX}{i}") for i in range(1, count + 1)]
        ports: dict[str, int] = {}
        for node in wanted:
            vm.prepare(node, image, key, backing)
            if node.pid() is None:
                ports[node.name] = vm.start(node, image, accel, memory_mb, cpus)
                print(f"lab: {node.name} booting ({accel}) on 127.0.0.1:{ports[node.name]}", file=sys.stderr)
            else:
                ports[node.name] = node.port() or 0
        self._write_known_hosts()
        boot_started = time.monotonic()
        for node in wanted:
            vm.wait_for_ssh(node, self.state_dir, ports[node.name], timeout)
        self.write_inventory()
        timings = {
            "image_build_s": build_seconds or 0.0,
            "boot_to_ssh_s": time.monotonic() - boot_started,
            "total_s": time.monotonic() - started,
        }
        (self.state_dir / "last-up.json").write_text(json.dumps({"accel": accel, **timings}, indent=2))
        print(
            f"lab: {len(wanted)} node(s) answer over SSH ({accel}); total {timings['total_s']:.1f}s, "
            f"image {'built in ' + format(build_seconds, '.1f') + 's' if build_seconds else 'from cache'}",
            file=sys.stderr,
        )
        return timings

    def down(self, force: bool = False) -> None:
        for node in self.nodes():
            vm.stop(node, graceful=not force)
        for pid in vm.qemu_processes(self.state_dir):  # strays whose pidfile went missing
            os.kill(pid, 9)
        left = vm.qemu_processes(self.state_dir)
        if left:
            raise vm.LabError(f"qemu processes still running after down: {left}")

    def poweroff(self, name: str) -> None:
        """Pull the plug on one node (no shutdown), as a power failure would."""
        vm.stop(self.known_node(name), graceful=False)

    def destroy(self, drop_image: bool) -> None:
        self.down(force=True)
        shutil.rmtree(self.state_dir, ignore_errors=True)
        self.inventory.unlink(missing_ok=True)
        if drop_image:
            shutil.rmtree(self.cache_dir, ignore_errors=True)

    def status(self) -> list[dict[str, object]]:
        rows = []
        for node in self.nodes():
            pid = node.pid()
            rows.append({"node": node.name, "running": pid is not None, "pid": pid, "ssh_port": node.port()})
        return rows

    def ssh_command(self, name: str, command: list[str]) -> list[str]:
        node = self.known_node(name)
        port = node.port()
        if node.pid() is None or port is None:
            raise vm.LabError(f"{name} is not running; run `scripts/lab up`")
        return [*vm.ssh_base(node, self.state_dir, port), "root@127.0.0.1", *command]

    # --- files for SSH and Ansible ---------------------------------------------------------

    def _write_known_hosts(self) -> None:
        lines = []
        for node in self.nodes():
            key_type, key = node.host_key.with_suffix(".pub").read_text().split()[:2]
            lines.append(f"{node.name} {key_type} {key}\n")
        (self.state_dir / "known_hosts").write_text("".join(lines))

    def write_inventory(self) -> None:
        """inventories/lab/hosts.yml: every running node, with its port, key and known_hosts."""
        key = self.state_dir / "id_ed25519"
        known = self.state_dir / "known_hosts"
        lines = [
            "---",
            "# Written by `scripts/lab up`; do not edit (git-ignored).",
            "all:",
            "  children:",
            "    gpu_nodes:",
            "      hosts:",
        ]
        for node in self.nodes():
            if node.pid() is None:
                continue
            args = f"-o UserKnownHostsFile={known} -o StrictHostKeyChecking=yes -o HostKeyAlias={node.name}"
            lines += [
                f"        {node.name}:",
                "          ansible_host: 127.0.0.1",
                f"          ansible_port: {node.port()}",
                "          ansible_user: root",
                f"          ansible_ssh_private_key_file: {key}",
                f'          ansible_ssh_common_args: "{args}"',
            ]
        self.inventory.parent.mkdir(parents=True, exist_ok=True)
        self.inventory.write_text("\n".join(lines) + "\n")
