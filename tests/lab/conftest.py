"""The lab suite's fixtures: one fresh qemu node per session, converged by site.yml.

The node lives in its own state directory and inventory (not the developer's `make lab`
node); the VM image comes from the shared cache, so only the first run on a machine builds it.

LAB_REUSE_INVENTORY=<hosts.yml of a running lab> (opt-in) runs the tests against that lab's
first node instead: nothing is booted, checked or converged, and the node is left running.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from lab_fleet.ansible_env import ansible_env
from lab_fleet.lab import Lab
from tests.lab.play_report import PlayReport, assert_succeeded

REPO = Path(__file__).resolve().parents[2]
REUSE_ENV = "LAB_REUSE_INVENTORY"


@dataclass
class LabNode:
    """A lab VM under test: run commands on it over SSH, run playbooks against it."""

    lab: Lab
    name: str
    inventory: Path
    fact_cache: Path
    runs: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)
    reused: bool = False  # a running node from LAB_REUSE_INVENTORY: no check or converge run here

    def run_of(self, key: str) -> subprocess.CompletedProcess[str]:
        """The session's "check" or "converge" run; skips the test on a reused node, which has none."""
        if key not in self.runs:
            pytest.skip(f"{REUSE_ENV} reuses a running node: this session made no {key} run")
        return self.runs[key]

    def run(self, cmd: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            self.lab.ssh_command(self.name, [cmd]), capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(f"{self.name}: `{cmd}` exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result

    def env(self, **extra: str) -> dict[str, str]:
        return ansible_env(self.fact_cache, **extra)

    def playbook(
        self,
        playbook: str = "playbooks/site.yml",
        *args: str,
        json_output: bool = True,
        timeout: float = 1800,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        extra = {"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"} if json_output else {}
        extra.update(env or {})
        command = ["ansible-playbook", "-i", str(self.inventory.parent), playbook, *args]
        try:
            return subprocess.run(
                command, cwd=REPO, env=self.env(**extra), capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as expired:
            output = expired.stdout.decode(errors="replace") if isinstance(expired.stdout, bytes) else expired.stdout
            raise AssertionError(
                f"{' '.join(command)} did not reach its play recap within {timeout:.0f} s; output so far:\n"
                f"{(output or '')[-3000:]}"
            ) from None

    def packages(self) -> dict[str, tuple[str, str]]:
        """{package: (version, selection)} for every installed package."""
        out = self.run("dpkg-query -W -f='${Package} ${Version} ${db:Status-Want}\\n'").stdout
        rows = (line.split() for line in out.splitlines() if line.strip())
        return {row[0]: (row[1], row[2]) for row in rows if len(row) == 3}


def stats(result: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """The play recap of a json-callback run, for the one lab host."""
    return PlayReport.parse(result).host_stats()


def changed_tasks(result: subprocess.CompletedProcess[str]) -> list[str]:
    return list(PlayReport.parse(result).changed)


def reused_node(inventory: Path, fact_cache: Path) -> LabNode:
    """The first host of a running lab's inventory (written by `scripts/lab up`, beside its state dir's key)."""
    try:
        hosts = yaml.safe_load(inventory.read_text())["all"]["children"]["gpu_nodes"]["hosts"]
        name, host = next(iter(hosts.items()))
        state_dir = Path(host["ansible_ssh_private_key_file"]).parent
    except (OSError, yaml.YAMLError, KeyError, TypeError, StopIteration, AttributeError) as error:
        raise pytest.UsageError(
            f"{REUSE_ENV}={inventory}: not a lab inventory with a host under all.children.gpu_nodes.hosts "
            f"and its ansible_ssh_private_key_file ({type(error).__name__}: {error})"
        ) from None
    lab = Lab(state_dir=state_dir, cache_dir=Lab.from_environment().cache_dir, inventory=inventory)
    if lab.known_node(name).pid() is None:
        raise pytest.UsageError(f"{REUSE_ENV}={inventory}: {name} is not running (state dir {state_dir})")
    return LabNode(lab=lab, name=name, inventory=inventory, fact_cache=fact_cache, reused=True)


@pytest.fixture(scope="session")
def lab_vm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabNode]:
    """A fresh, unprovisioned lab node (or the running one that LAB_REUSE_INVENTORY names, left running)."""
    if reuse := os.environ.get(REUSE_ENV):
        yield reused_node(Path(reuse).resolve(), tmp_path_factory.mktemp("facts"))
        return
    root = tmp_path_factory.mktemp("lab")
    inventory_dir = root / "inventory"
    shutil.copytree(REPO / "inventories/lab/group_vars", inventory_dir / "group_vars")
    lab = Lab(
        state_dir=root / "state", cache_dir=Lab.from_environment().cache_dir, inventory=inventory_dir / "hosts.yml"
    )
    lab.up(count=1, memory_mb=1536, cpus=2, timeout=600)
    node = LabNode(lab=lab, name="lab-node-1", inventory=lab.inventory, fact_cache=root / "facts")
    try:
        yield node
    finally:
        lab.destroy(drop_image=False)


@pytest.fixture(scope="session")
def lab_node(lab_vm: LabNode) -> LabNode:
    """The lab node after three site.yml runs on the fresh node, kept in `lab_node.runs`:

    "check"     --check --diff
    "refused"   reboots not allowed (nvidia_driver_reboot_allowed=false): the first install
                needs one (nouveau blacklisted), so it must fail naming the variable
    "converge"  as the lab inventory says (reboots allowed): reboots and converges
    A reused node (LAB_REUSE_INVENTORY) is taken as it is, with none of them.
    """
    if not lab_vm.reused and "converge" not in lab_vm.runs:
        lab_vm.runs["check"] = lab_vm.playbook("playbooks/site.yml", "--check", "--diff")
        no_reboot = json.dumps({"nvidia_driver_reboot_allowed": False})
        lab_vm.runs["refused"] = lab_vm.playbook("playbooks/site.yml", "-e", no_reboot)
        lab_vm.runs["converge"] = lab_vm.playbook("playbooks/site.yml")
        converge = lab_vm.runs["converge"]
        assert_succeeded(converge, "site.yml on the fresh node: ")
    return lab_vm
