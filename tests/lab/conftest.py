"""The lab suite's fixtures: one fresh qemu node per session, converged by site.yml.

The node lives in its own state directory and inventory (not the developer's `make lab`
node); the VM image comes from the shared cache, so only the first run on a machine builds it.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lab_fleet.ansible_env import ansible_env
from lab_fleet.lab import Lab
from tests.lab.play_report import PlayReport, assert_succeeded

REPO = Path(__file__).resolve().parents[2]


@dataclass
class LabNode:
    """A lab VM under test: run commands on it over SSH, run playbooks against it."""

    lab: Lab
    name: str
    inventory: Path
    fact_cache: Path
    runs: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)

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


@pytest.fixture(scope="session")
def lab_vm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabNode]:
    """A fresh, unprovisioned lab node."""
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
    """The lab node after a --check --diff run on the fresh node and a converging site.yml run.

    Both runs are kept in `lab_node.runs` ("check", "converge") for the tests that judge them.
    """
    if "converge" not in lab_vm.runs:
        lab_vm.runs["check"] = lab_vm.playbook("playbooks/site.yml", "--check", "--diff")
        lab_vm.runs["converge"] = lab_vm.playbook("playbooks/site.yml")
        converge = lab_vm.runs["converge"]
        assert_succeeded(converge, "site.yml on the fresh node: ")
    return lab_vm
