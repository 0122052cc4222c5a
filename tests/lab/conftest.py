"""The lab suite's fixtures: converged nodes booted from a cached image, one per module.

`fresh_proofs` (session) finds the converged image of the node inputs as they are now in the
cache (lab_fleet/converged.py), or produces it: a fresh node gets check mode, the refused first
install, the converge with its reboot and a no-op re-run, and its disk is kept only when every
judge of tests/lab/fresh_node.py passes. `lab_node` (module) boots an overlay of that image in a
state directory of its own and destroys it after the module; `own_node` (function) does the same
for one test that changes the node. No module depends on another's order or leftovers.

LAB_REUSE_INVENTORY=<hosts.yml of a running lab> (opt-in) runs the tests against that lab's
first node instead: nothing is booted, checked or converged, and the node is left running.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from lab_fleet import converged
from lab_fleet.ansible_env import ansible_env
from lab_fleet.lab import Lab
from model_repo_check.tritonserver.processes import stop_group
from tests.lab import fresh_node
from tests.lab.play_report import PlayReport

REPO = Path(__file__).resolve().parents[2]
REUSE_ENV = "LAB_REUSE_INVENTORY"
FIRST_INSTALL_TIMEOUT_S = 3600


@dataclass
class LabNode:
    """A lab VM under test: run commands on it over SSH, run playbooks against it."""

    lab: Lab
    name: str
    inventory: Path
    fact_cache: Path
    reused: bool = False  # a running node from LAB_REUSE_INVENTORY, left running

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
        # Its own process group: ansible-playbook forks workers (and Mitogen its brokers), which a
        # plain timeout would leave running against the node after the test has given up on them.
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env=self.env(**extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_group(process.pid)
            stdout, _ = process.communicate()
            raise AssertionError(
                f"{' '.join(command)} did not reach its play recap within {timeout:.0f} s; output so far:\n"
                f"{(stdout or '')[-3000:]}"
            ) from None
        except BaseException:
            stop_group(process.pid)
            raise
        return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)

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


@dataclass(frozen=True)
class FreshProofs:
    """The fresh-node runs that produced the converged image this session boots its nodes from.

    `runs` is empty when the image came from the cache (its proofs passed when it was written and
    run again whenever a node input changes) or when LAB_REUSE_INVENTORY names a running node;
    `absent` then says why, and `run_of` skips the test that judges a run with that reason.
    """

    image: converged.ConvergedImage | None
    runs: fresh_node.Runs = field(default_factory=dict)
    absent: str = ""

    def run_of(self, key: str) -> subprocess.CompletedProcess[str]:
        if key not in self.runs:
            pytest.skip(f"no {key!r} run in this session: {self.absent}")
        return self.runs[key]


def boot(tmp_path_factory: pytest.TempPathFactory, label: str, backing: Path | None) -> LabNode:
    """One lab node in a state directory of its own, over the base image or over `backing`."""
    root = tmp_path_factory.mktemp(label)
    inventory_dir = root / "inventory"
    shutil.copytree(REPO / "inventories/lab/group_vars", inventory_dir / "group_vars")
    lab = Lab(
        state_dir=root / "state", cache_dir=Lab.from_environment().cache_dir, inventory=inventory_dir / "hosts.yml"
    )
    node = LabNode(lab=lab, name="lab-node-1", inventory=lab.inventory, fact_cache=root / "facts")
    try:
        lab.up(count=1, memory_mb=1536, cpus=2, timeout=600, backing=backing)
    except BaseException:
        lab.destroy(drop_image=False)
        raise
    return node


@contextmanager
def booted(tmp_path_factory: pytest.TempPathFactory, label: str, backing: Path | None) -> Iterator[LabNode]:
    node = boot(tmp_path_factory, label, backing)
    try:
        yield node
    finally:
        node.lab.destroy(drop_image=False)


def _session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every process of this pytest session sees: xdist's workers each get a folder below it."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _save_runs(path: Path, runs: fresh_node.Runs) -> None:
    data = {key: [run.args, run.returncode, run.stdout, run.stderr] for key, run in runs.items()}
    path.write_text(json.dumps(data))


def _load_runs(path: Path) -> fresh_node.Runs:
    return {key: subprocess.CompletedProcess(*fields) for key, fields in json.loads(path.read_text()).items()}


@pytest.fixture(scope="session")
def fresh_proofs(tmp_path_factory: pytest.TempPathFactory) -> FreshProofs:
    """The converged image of the node inputs as they are now (lab_fleet/converged.py).

    Missing from the cache, it is produced here: a node booted from the base image gets the four
    fresh-node runs (tests/lab/fresh_node.py), every judge must pass, and only then is the node
    powered down and its disk kept. Present, it is used as it is and no fresh node is booted.
    Under xdist one worker produces it while the others wait on its lock; they then judge the
    same runs, kept in the session's folder, and a failed production fails them all at once
    instead of making each worker try again.
    """
    if os.environ.get(REUSE_ENV):
        return FreshProofs(image=None, absent=f"{REUSE_ENV} reuses a running node")
    image = converged.cached(Lab.from_environment().cache_dir)
    session_runs = _session_dir(tmp_path_factory) / f"fresh-runs-{image.directory.name}.json"
    session_failure = session_runs.with_suffix(".failed")
    with converged.producing(image) as needed:
        if session_failure.exists():
            pytest.fail(
                f"the fresh-node proofs failed in this session, on another worker: {session_failure.read_text()}"
            )
        if session_runs.exists():
            return FreshProofs(image=image, runs=_load_runs(session_runs))
        if not needed:
            return FreshProofs(image=image, absent=f"{image.describe()} (cached; a node input change reruns them)")
        try:
            runs = _produce(tmp_path_factory, image)
        except BaseException as error:
            session_failure.write_text(f"{type(error).__name__}: {str(error)[:2000]}")
            raise
        _save_runs(session_runs, runs)
    return FreshProofs(image=image, runs=runs)


def _produce(tmp_path_factory: pytest.TempPathFactory, image: converged.ConvergedImage) -> fresh_node.Runs:
    """The four fresh-node runs on a node booted from the base image; its disk kept when every judge passes."""
    runs: fresh_node.Runs = {}
    with booted(tmp_path_factory, "fresh", backing=None) as node:
        runs["check"] = node.playbook("playbooks/site.yml", "--check", "--diff")
        no_reboot = json.dumps({"nvidia_driver_reboot_allowed": False})
        # The first install (dpkg and two initramfs rebuilds under TCG) took 20 min on a quiet
        # machine and over 30 with two more agents' tests sharing the two cores.
        runs["refused"] = node.playbook("playbooks/site.yml", "-e", no_reboot, timeout=FIRST_INSTALL_TIMEOUT_S)
        runs["converge"] = node.playbook("playbooks/site.yml", timeout=FIRST_INSTALL_TIMEOUT_S)
        fresh_node.judge_converge(runs)
        runs["noop"] = node.playbook("playbooks/site.yml")
        for judge in fresh_node.JUDGES.values():
            judge(runs)
        node.lab.down()  # an ACPI power-down: the guest flushes its disk before qemu exits
        converged.save(image, node.lab.node(node.name).disk, proofs=list(fresh_node.JUDGES))
    return runs


@pytest.fixture(scope="module")
def lab_node(fresh_proofs: FreshProofs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabNode]:
    """A converged node of the module's own: an overlay of the converged image, destroyed after the
    module, so no module sees another's changes (or the running node LAB_REUSE_INVENTORY names)."""
    if reuse := os.environ.get(REUSE_ENV):
        yield reused_node(Path(reuse).resolve(), tmp_path_factory.mktemp("facts"))
        return
    assert fresh_proofs.image is not None
    with booted(tmp_path_factory, "converged", backing=fresh_proofs.image.disk) as node:
        yield node


@pytest.fixture
def own_node(fresh_proofs: FreshProofs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabNode]:
    """A converged node for one test alone, for a test that changes the node beyond what site.yml restores."""
    if os.environ.get(REUSE_ENV):
        pytest.skip(f"{REUSE_ENV}: this test changes the node it runs on, and needs one of its own")
    assert fresh_proofs.image is not None
    with booted(tmp_path_factory, "own", backing=fresh_proofs.image.disk) as node:
        yield node
