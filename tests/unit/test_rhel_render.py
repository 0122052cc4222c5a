"""The RHEL path of roles/nvidia_driver (tasks/dnf.yml) as Ansible renders and runs it for a RedHat 9 node.

Each case runs the real ansible-playbook (roles, defaults from the platform matrix, includes,
`when`, templating, registers, check mode: all Ansible's own) with the role's read_state and
dnf entry points, against a node that only answers from a recording (tests/unit/recorded_node.py):
facts of a RedHat 9 host, and what its `uname -r`, rpm query and dnf module file would print.
No module runs; the json callback reports every task with the arguments it was given. The
expected names and versions come from the platform matrix, not from this file.

Proven: the tasks dnf.yml asks of a RHEL node, their arguments and their order: NVIDIA's CUDA
repository at rhel9/x86_64, the dnf module stream of the pinned branch and flavour (reset first
when another stream is enabled), the versionlock plugin and the locks at the pin, the running
kernel's kernel-devel-matched and kernel-headers, the driver packages (kernel module and fabric
manager where the node needs them) in one transaction at the pinned versions, the reboot mark,
check mode's prediction, and that a converged node runs no install.

NOT proven: that dnf, the CUDA repository, the versionlock plugin, DKMS or the kernel behave
as recorded. dnf never ran: package names, the stream, the "-1.el9" release form and the
dependency chain are NVIDIA's documentation read, not a RHEL host's answer (no RHEL image can
be built from the archives reachable here).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from platform_matrix import load
from tests.unit.recorded_node import run_playbook

REPO = Path(__file__).resolve().parents[2]
MATRIX = load().data
SOURCE = MATRIX["operating_systems"]["RedHat"]["driver_source"]
PINNED = MATRIX["nvidia_driver"]["sources"][SOURCE]
FLAVOUR = MATRIX["nvidia_driver"]["kernel_module"]
MODULE = PINNED["dnf_module"]["name"]
STREAM_NAME = PINNED["dnf_module"]["streams"][FLAVOUR]
STREAM = f"{MODULE}:{STREAM_NAME}"
HEADERS = MATRIX["kernel_headers"]["RedHat"]["9"]["flavours"]
REBOOT_MARKER = yaml.safe_load((REPO / "roles/nvidia_driver/vars/main.yml").read_text())["nvidia_driver_reboot_marker"]
# What playbooks/upgrade_driver.yml read before issue 13 (apt.yml registered it, dnf hosts never did).
CHANGED = "nvidia_driver_userspace_install is changed"
KERNEL = "5.14.0-427.13.1.el9_4.x86_64"
FACTS = {
    "distribution": "RedHat",
    "distribution_major_version": "9",
    "distribution_version": "9.4",
    "os_family": "RedHat",
    "architecture": "x86_64",
    "kernel": KERNEL,
    "pkg_mgr": "dnf",
    "service_mgr": "systemd",
}


def specs(packages: list[str], version: str) -> list[str]:
    return [f"{package}-{version}" for package in packages]


def module_file(stream: str) -> str:
    """dnf's /etc/dnf/modules.d/<module>.module with `stream` enabled."""
    return f"[{MODULE}]\nname={MODULE}\nstream={stream}\nprofiles=\nstate=enabled\n"


def rpm_lines(packages: list[str], version: str) -> str:
    """What read_state's rpm query prints for installed packages (NAME, VERSION-RELEASE)."""
    return "".join(f"{package}\t{version}\tinstall\tinstalled\n" for package in packages)


@dataclass
class Node:
    """A recorded RedHat 9 node and the preflight facts the role gets about it."""

    gpu: bool
    fabric_manager: bool = False
    kernel: str = KERNEL
    facts: dict[str, Any] = field(default_factory=dict)
    rpm: str = ""
    module_file: str | None = None
    changed: bool = True

    def answers(self) -> dict[str, Any]:
        module_read = {"match": r"modules\.d/", "rc": 2, "stdout": ""}
        if self.module_file is not None:
            module_read = {"match": r"modules\.d/", "rc": 0, "stdout": self.module_file}
        return {
            "facts": {**FACTS, "kernel": self.kernel, **self.facts},
            "changed": self.changed,
            "reads": [
                {"match": r"^uname -r$", "stdout": f"{self.kernel}\n"},
                {"match": r"rpm --query", "rc": 0 if self.rpm else 1, "stdout": self.rpm + "nvidia-module-loaded \n"},
                module_read,
            ],
        }

    def preflight(self) -> dict[str, Any]:
        flavour = self.kernel.split("+")[1] if "+" in self.kernel else "default"
        return {
            "preflight_gpu_present": self.gpu,
            "preflight_fabric_manager_required": self.fabric_manager,
            "preflight_kernel_headers_package": HEADERS[flavour],
            "gpu_fleet_gpu_count": 8 if self.gpu else 0,
        }


class Run:
    """The json callback's report of one play: the results of its tasks, in order."""

    def __init__(self, report: dict[str, Any], stderr: str) -> None:
        self.tasks = [(t["task"]["name"], t["hosts"]["rhel9"]) for t in report["plays"][0]["tasks"]]
        self.stats = report["stats"]["rhel9"]
        self.stderr = stderr

    def failures(self) -> list[str]:
        """The failed tasks with their messages (assertion messages of the tests below)."""
        return [f"{task}: {result.get('msg')}" for task, result in self.tasks if result.get("failed")]

    def index(self, name: str) -> int:
        found = [i for i, (task, _) in enumerate(self.tasks) if task.startswith(f"nvidia_driver : {name}")]
        assert len(found) == 1, f"expected one task named {name!r}, found {len(found)}: {[t for t, _ in self.tasks]}"
        return found[0]

    def result(self, name: str) -> dict[str, Any]:
        return self.tasks[self.index(name)][1]

    def args(self, name: str) -> dict[str, Any]:
        """The module arguments of a task that ran (skipped ones have none)."""
        result = self.result(name)
        assert not result.get("skipped"), f"{name!r} was skipped: {result.get('false_condition')}"
        return result["invocation"]["module_args"]

    def skipped(self, name: str) -> bool:
        return bool(self.result(name).get("skipped"))

    def value(self, name: str) -> Any:
        """A value the play's last task reported (debug var)."""
        return self.tasks[-1][1][name]


def role_entry(tasks_from: str) -> dict[str, Any]:
    return {
        "name": f"Run roles/nvidia_driver/tasks/{tasks_from}.yml",
        "ansible.builtin.include_role": {"name": "nvidia_driver", "tasks_from": tasks_from, "public": True},
    }


def run(
    tmp_path: Path,
    node: Node,
    extra: dict[str, Any] | None = None,
    check: bool = False,
    forced: dict[str, Any] | None = None,
) -> Run:
    """One play: read_state, then dnf. `extra` are play vars; `forced` are extra vars (-e), over role vars too."""
    play = [
        {
            "name": "A recorded RedHat 9 node",
            "hosts": "rhel9",
            "gather_facts": True,
            "vars": {**node.preflight(), **(extra or {})},
            "tasks": [
                role_entry("read_state"),
                role_entry("dnf"),
                {"name": "Report what a playbook reads", "ansible.builtin.debug": {"var": CHANGED}},
            ],
        }
    ]
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    args = ["-i", "rhel9,", "-c", "local", str(playbook), *(["--check"] if check else [])]
    args += ["-e", json.dumps(forced)] if forced else []
    done = run_playbook(node.answers(), args, tmp_path, timeout=120)
    assert done.stdout.startswith("{"), f"ansible-playbook rc={done.returncode}\n{done.stdout}\n{done.stderr}"
    return Run(json.loads(done.stdout), done.stderr)


def test_fresh_nvswitch_gpu_node(tmp_path):
    ran = run(tmp_path, Node(gpu=True, fabric_manager=True))
    assert not ran.failures(), ran.failures()
    repo = "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64"
    assert ran.args("Enable NVIDIA's CUDA repository") == {
        "name": "cuda-rhel9-x86_64",
        "description": "NVIDIA CUDA repository rhel9/x86_64",
        "baseurl": repo,
        "gpgkey": f"{repo}/D42D0685.pub",
        "gpgcheck": True,
    }
    assert ran.args("Install the dnf versionlock plugin")["name"] == "python3-dnf-plugin-versionlock"
    assert ran.args("Install the kernel headers and kernel-devel of the running kernel")["name"] == [
        f"{HEADERS['default']}-{KERNEL}",
        f"kernel-headers-{KERNEL}",
    ]
    assert ran.skipped("Reset the module from its other stream")
    assert ran.args("Enable the stream of the pinned branch")["argv"] == ["dnf", "-y", "module", "enable", STREAM]
    assert ran.skipped("Unlock the packages installed at another version")
    driver = PINNED["userspace_packages"] + PINNED["kernel_packages"][FLAVOUR]
    fabric_manager = [PINNED["fabricmanager_package"]]
    wanted = specs(driver, PINNED["package_version"]) + specs(fabric_manager, PINNED["fabricmanager_package_version"])
    install = ran.args("Install the driver packages at the pinned version")
    assert install == {"name": wanted, "state": "present", "allow_downgrade": True, "allowerasing": False}
    assert ran.args("Mark the node for a reboot")["path"] == REBOOT_MARKER
    assert ran.args("Lock the driver packages at the pinned version") == {"name": wanted, "state": "present"}
    order = [
        "Enable NVIDIA's CUDA repository",
        "Install the dnf versionlock plugin",
        "Install the kernel headers and kernel-devel of the running kernel",
        "Enable the stream of the pinned branch",
        "Install the driver packages at the pinned version",
        "Mark the node for a reboot",
        "Lock the driver packages at the pinned version",
    ]
    assert [ran.index(name) for name in order] == sorted(ran.index(name) for name in order)
    assert ran.value(CHANGED) is True


def test_branch_change_resets_the_stream_and_unlocks_before_installing(tmp_path):
    """upgrade_driver.yml on a GPU node of an older branch: its stream enabled, its packages installed and locked."""
    old_branch, old_version = "535", "535.216.03-1.el9"
    installed = PINNED["userspace_packages"] + PINNED["kernel_packages"][FLAVOUR]
    node = Node(
        gpu=True,
        rpm=rpm_lines(installed, old_version),
        module_file=module_file(STREAM_NAME.replace(STREAM_NAME.split("-")[0], old_branch, 1)),
    )
    ran = run(tmp_path, node, {"nvidia_driver_allow_change": True})
    assert not ran.failures(), ran.failures()
    assert ran.args("Reset the module from its other stream")["argv"] == [
        "dnf",
        "-y",
        "module",
        "reset",
        MODULE,
    ]
    assert ran.args("Enable the stream of the pinned branch")["argv"][-1] == STREAM
    assert ran.args("Unlock the packages installed at another version") == {"name": installed, "state": "absent"}
    install = ran.args("Install the driver packages at the pinned version")
    assert install["name"] == specs(installed, PINNED["package_version"])
    assert install["allowerasing"] is True
    order = [
        "Reset the module from its other stream",
        "Enable the stream of the pinned branch",
        "Unlock the packages installed at another version",
        "Install the driver packages at the pinned version",
        "Lock the driver packages at the pinned version",
    ]
    assert [ran.index(name) for name in order] == sorted(ran.index(name) for name in order)


def test_converged_node_installs_nothing(tmp_path):
    """A CPU-only aarch64 node on the 64k kernel, at the pin, its stream enabled; versionlock not wanted.

    The pin is given in rpm's VERSION-RELEASE form, the form the rpm read can match exactly.
    """
    pin = PINNED["package_version"] if "-" in PINNED["package_version"] else f"{PINNED['package_version']}-1.el9"
    kernel = "5.14.0-427.13.1.el9_4.aarch64+64k"
    node = Node(
        gpu=False,
        kernel=kernel,
        facts={"architecture": "aarch64"},
        rpm=rpm_lines(PINNED["userspace_packages"], pin),
        module_file=module_file(STREAM_NAME),
        changed=False,
    )
    ran = run(tmp_path, node, {"nvidia_driver_package_version": pin, "nvidia_driver_hold": False})
    assert not ran.failures(), ran.failures()
    release = kernel.split("+")[0]
    assert ran.args("Install the kernel headers and kernel-devel of the running kernel")["name"] == [
        f"{HEADERS['64k']}-{release}",
        f"kernel-headers-{release}",
    ]
    for name in (
        "Install the dnf versionlock plugin",
        "Reset the module from its other stream",
        "Enable the stream of the pinned branch",
        "Unlock the packages installed at another version",
        "Install the driver packages at the pinned version",
        "Mark the node for a reboot",
        "Lock the driver packages at the pinned version",
    ):
        assert ran.skipped(name), name
    assert ran.value(CHANGED) is False


def test_check_mode_on_a_fresh_node_predicts_and_changes_nothing(tmp_path):
    ran = run(tmp_path, Node(gpu=True), check=True)
    assert not ran.failures(), ran.failures()
    # The command module skips in check mode: the stream is not enabled for real.
    assert ran.result("Enable the stream of the pinned branch")["skipped"]
    prediction = ran.result("Predict the driver install")["msg"]
    wanted = specs(PINNED["userspace_packages"] + PINNED["kernel_packages"][FLAVOUR], PINNED["package_version"])
    assert f"Would enable {STREAM}, install {' '.join(wanted)} and lock them" in prediction
    for name in (
        "Install the driver packages at the pinned version",
        "Lock the driver packages at the pinned version",
        "Mark the node for a reboot",
    ):
        assert ran.skipped(name), name


@pytest.mark.parametrize("variable", ["nvidia_driver_dnf_module", "nvidia_driver_dnf_module_stream"])
def test_a_source_without_a_dnf_stream_is_refused_before_any_change(tmp_path, variable):
    ran = run(tmp_path, Node(gpu=True), forced={variable: ""})
    assert ran.stats["failures"] == 1
    failed = ran.result("Check that the platform matrix names the dnf module stream")
    assert failed["failed"]
    assert f"set nvidia_driver.sources.{SOURCE}.dnf_module in platform_matrix/matrix.yml" in failed["msg"]
    assert variable in failed["msg"]
    assert not any(result.get("invocation") for name, result in ran.tasks if "CUDA repository" in name)
