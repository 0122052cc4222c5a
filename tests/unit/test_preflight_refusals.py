"""Every bad input that preflight refuses before any change, on a recording of the lab node.

The real ansible-playbook runs playbooks/site.yml with the lab inventory's group_vars
(inventories/lab) against a node that only answers from a recording (tests/unit/recorded_node.py):
no module runs, and an action that would run a command without one fails. One run holds every
case of tests/preflight_cases.py: one inventory host per case, its bad input as that host's
variables. A host variable wins over the lab's group_vars and the role defaults, as `-e` does on
the lab VM; no role vars, play vars or set_fact name a case's variable (one that did would override the host
variable, not `-e`, and its case would fail here).

The recording is the converged lab node (Debian 12 amd64 VM, lab_fleet/image.py). From the
record of a real one (tests/unit/compliance/node_records/lab_node_converged.json): the release
(Debian 12), the running kernel (its cloud-amd64 flavour), the cgroup v2 controllers and the
NVIDIA GPUs on the PCI bus (none). As the lab runs it: x86_64, apt, systemd, and no headers for
the running kernel (the image has none, and the driver role installs them only where a GPU is).
Not from a node: the point release (the record names 12 only; preflight keys Debian by its
major) and the free space on / (a stand-in between the lab's 2 GiB floor and its 6 GiB disk).

Proven, for each case: the run fails in a `preflight : ` task whose message names the variable
and problem (and, for the problem list, that the input finds no problem beyond those the case
names, so the recording alone passes preflight); no task outside preflight runs but fact
gathering and a skipped one, and no task reports a change. "The node is never touched" rests
on that: nothing ran that could touch it.

NOT proven: what a real node answers (the sysfs, cgroup and uname reads are recorded, not run),
nor the run over SSH on Mitogen (here the plays run on the linear strategy, with no connection).
tests/lab/test_bad_input.py keeps three cases on a real VM and compares its packages and /etc.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml

from tests.lab.play_report import PlayReport, Step
from tests.preflight_cases import CASES, BadInput, matrix_variants
from tests.unit.recorded_node import REPO, run_playbook

LAB_NODE = json.loads((REPO / "tests/unit/compliance/node_records/lab_node_converged.json").read_text())
GIB = 1024**3
REFUSAL = "preflight : Stop before any change when the node is not fit"


def lab_node() -> dict[str, Any]:
    """The recording: the converged lab node's facts and what preflight's one read prints there."""
    os_release = LAB_NODE["os_release"]
    kernel = LAB_NODE["kernel"]
    read = [f"cgroup2 {' '.join(LAB_NODE['cgroup']['controllers'])}"]
    read += [f"gpu {address}" for address in LAB_NODE["gpu"]["pci_gpus"]]
    read += [f"kernel {kernel}"]  # no "kernel-headers": /lib/modules/<kernel>/build is missing
    return {
        "facts": {
            "distribution": "Debian",
            "distribution_major_version": os_release["VERSION_ID"],
            "distribution_version": os_release["VERSION_ID"],
            "distribution_release": os_release["VERSION_CODENAME"],
            "os_family": "Debian",
            "architecture": "x86_64",
            "kernel": kernel,
            "pkg_mgr": "apt",
            "service_mgr": "systemd",
            "mounts": [
                {
                    "mount": "/",
                    "device": "/dev/vda",
                    "fstype": "ext4",
                    "size_total": 6 * GIB,
                    "size_available": 4 * GIB,
                }
            ],
        },
        # Any module outside preflight would report a change.
        "changed": True,
        "reads": [{"match": r"/sys/bus/pci/devices", "stdout": "\n".join(read) + "\n"}],
    }


def host(index: int) -> str:
    return f"bad-input-{index:02d}"


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[PlayReport, list[Step]]]:
    """One site.yml run with a host per case: {case name: (the run's report, that host's steps)}."""
    workdir = tmp_path_factory.mktemp("refusals")
    variants = matrix_variants(workdir)
    inventory = workdir / "inventory"
    inventory.mkdir()
    (inventory / "group_vars").symlink_to(REPO / "inventories/lab/group_vars")
    hosts = {host(i): case.extra_vars(variants) for i, case in enumerate(CASES)}
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    started = time.monotonic()
    done = run_playbook(lab_node(), ["-i", str(inventory / "hosts.yml"), "-c", "local", "playbooks/site.yml"], workdir)
    print(f"site.yml for {len(CASES)} cases on the recorded lab node: {time.monotonic() - started:.1f} s")
    report = PlayReport.parse(done)
    assert not report.incomplete, report.verdict()
    return {case.name: (report, [s for s in report.steps if s.host == host(i)]) for i, case in enumerate(CASES)}


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_refused_in_preflight_before_any_change(refusals, case: BadInput):
    report, steps = refusals[case.name]
    failed = [step for step in steps if step.outcome in ("failed", "unreachable")]
    assert len(failed) == 1, f"{case.name}: expected one failed task, got {failed}; {report.verdict()}"
    (refused,) = failed
    assert refused == steps[-1], f"{case.name}: tasks ran after the failure: {steps[steps.index(refused) + 1 :]}"
    assert refused.task.startswith("preflight : "), f"{case.name}: failed in {refused.task!r}, not in preflight"
    assert case.expected in refused.message, f"{case.name}: {case.expected!r} not in {refused.message!r}"
    if refused.task == REFUSAL:
        wanted = (case.expected, *case.also_found)
        assert f"preflight found {len(wanted)} problem(s)" in refused.message, refused.message
        assert all(text in refused.message for text in wanted), f"{wanted} not all in {refused.message!r}"
    outside = [s for s in steps if not s.task.startswith("preflight : ")]
    ran = [s for s in outside if not (s.outcome == "skipped" or (s.task == "Gathering Facts" and s.outcome == "ok"))]
    assert not ran, f"{case.name}: tasks outside preflight ran: {ran}"
    assert not [s for s in steps if s.outcome == "changed"], f"{case.name}: a task reported a change"
