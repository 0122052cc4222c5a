"""Bad input fails before any change on a real lab VM: each case names the variable, and the node stays as it was.

The cases marked `on_vm` in tests/preflight_cases.py: a type caught by the argument specs,
a platform matrix rule, and GPUs declared where the real PCI bus shows none. Every case runs
offline against a recording of this node in tests/unit/test_preflight_refusals.py.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.lab.conftest import LabNode
from tests.lab.play_report import PlayReport
from tests.preflight_cases import CASES, BadInput, matrix_variants

pytestmark = pytest.mark.lab

VM_CASES = tuple(case for case in CASES if case.on_vm)


def _snapshot(node: LabNode) -> str:
    """Package versions and selections plus a checksum of every file under /etc."""
    return node.run(
        "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev} ${db:Status-Want}\\n';"
        " find /etc -xdev -type f ! -path /etc/resolv.conf ! -path /etc/ld.so.cache -print0"
        " | sort -z | xargs -0 sha256sum"
    ).stdout


def test_bad_input_fails_with_the_variable_named_and_changes_nothing(lab_node: LabNode, tmp_path: Path) -> None:
    variants = matrix_variants(tmp_path)
    before = _snapshot(lab_node)

    def run(case: BadInput) -> tuple[str, str, PlayReport]:
        name, extra, expected = case.name, case.extra_vars(variants), case.expected
        # One case took 4-26 s on an idle machine and up to 136 s with two TCG VMs and three CPU hogs
        # sharing the two cores: 600 s leaves room without hiding a hung run.
        run = lab_node.playbook("playbooks/site.yml", "-e", json.dumps(extra), timeout=600)
        return name, expected, PlayReport.parse(run)

    with ThreadPoolExecutor(max_workers=3) as pool:
        outcomes = list(pool.map(run, VM_CASES))
    failures = []
    for name, expected, report in outcomes:
        if not report.failed or report.unreachable:  # succeeded, unreachable or cut short: the verdict says which
            failures.append(f"{name}: {report.verdict()}")
            continue
        first = report.failed[0]
        if expected not in first.message:
            failures.append(f"{name}: {expected!r} not in the message of {first.task!r}:\n{first.message}")
        elif not first.task.startswith("preflight : "):
            failures.append(f"{name}: failed in {first.task!r}, not in preflight")
    assert not failures, "\n\n".join(failures)
    assert _snapshot(lab_node) == before, "a failed run changed packages or files under /etc"
    assert len(VM_CASES) == 3
