"""The compliance suite on the lab node: clean after site.yml, then broken on purpose, one way at a time.

Each test breaks the node (the other driver version is in test_driver_upgrade.py, which
installs it anyway), runs `python -m tests.compliance.run` against the lab inventory, checks
that the matching checks fail with a message that says what is wrong, and restores the node with
the fix an operator would use (then proves it clean again), so the tests run in any order.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_health.checks import CHECKS
from platform_matrix import load
from tests.compliance import report
from tests.compliance.node_checks import CONTAINERD_DROP_IN
from tests.lab.compliance_run import assert_clean, compliance
from tests.lab.conftest import LabNode

pytestmark = pytest.mark.lab

SOURCE = load().driver_source("debian-nonfree")
PIN = SOURCE["package_version"]


@pytest.fixture
def clean(lab_node: LabNode, tmp_path: Path) -> Iterator[LabNode]:
    """The converged node, proven compliant before the test and again after its restore."""
    assert_clean(lab_node, tmp_path / "before")
    yield lab_node
    assert_clean(lab_node, tmp_path / "after")


def test_the_converged_lab_node_complies_and_skips_the_gpu_checks_with_the_reason(lab_node, tmp_path):
    code, rows = compliance(lab_node, tmp_path)
    assert code == 0
    for check in (
        "driver_packages",
        "driver_held",
        "apt_pin",
        "upgrade_blacklist",
        "cgroup_unified",
        "cgroup_controllers",
        "containerd_nvidia_runtime",
        "containerd_systemd_cgroup",
        "containerd_default_runtime",
        "containerd_running",
    ):
        assert rows[check].status == "pass", (check, rows[check].message)
    gpu = {check: row for check, row in rows.items() if check.startswith("gpu.")}
    assert len(gpu) == len(CHECKS)
    for row in gpu.values():
        assert row.status == "skip" and row.message.startswith("no GPU on this node (gpu_fleet_gpu_count is 0")
    assert rows["kernel_module"].status == "skip" and "installed only on GPU nodes" in rows["kernel_module"].message
    assert rows["toolkit_isolation"].status == "skip", rows["toolkit_isolation"].message
    for check in ("metrics.limiter", "metrics.dcgm_exporter"):
        assert rows[check].status == "skip" and "gpu_fleet_gpu_count is 0" in rows[check].message
    assert (tmp_path / report.MARKDOWN_NAME).read_text().count(f"| {lab_node.name} |") == len(rows)


def test_an_unheld_driver_package_fails_driver_held(clean, tmp_path):
    package = SOURCE["userspace_packages"][0]
    clean.run(f"apt-mark unhold {package}")
    try:
        code, rows = compliance(clean, tmp_path)
    finally:
        clean.run(f"apt-mark hold {package}")
    assert code == 1
    assert rows["driver_held"].status == "fail"
    assert rows["driver_held"].message == f"not hold: {package} (install); run site.yml or `apt-mark hold` them"
    assert rows["driver_packages"].status == "pass"


def without_nvidia_runtime(config: str) -> str:
    """A TOML file with every [...runtimes.nvidia...] table (its header and keys) cut out, as a hand edit would."""
    return re.sub(r"(?m)^ *\[[^\]\n]*runtimes\.nvidia[^\]\n]*\]\n(?:(?! *\[).*\n)*", "", config)


def test_a_containerd_config_without_the_nvidia_runtime_fails(clean, tmp_path):
    clean.run(f"cp -p {CONTAINERD_DROP_IN} {CONTAINERD_DROP_IN}.compliance-test")
    try:
        broken = without_nvidia_runtime(clean.run(f"cat {CONTAINERD_DROP_IN}").stdout)
        clean.run(f"cat > {CONTAINERD_DROP_IN} <<'EOF'\n{broken}EOF\nsystemctl restart containerd")
        assert "runtimes.nvidia" not in clean.run("containerd config dump").stdout
        code, rows = compliance(clean, tmp_path)
    finally:
        clean.run(f"mv {CONTAINERD_DROP_IN}.compliance-test {CONTAINERD_DROP_IN} && systemctl restart containerd")
    assert code == 1
    runtime = rows["containerd_nvidia_runtime"]
    assert runtime.status == "fail"
    assert runtime.message == "`containerd config dump` has no nvidia runtime (runtimes: runc); run site.yml"
    assert rows["containerd_systemd_cgroup"].status == "fail" and "nvidia" in rows["containerd_systemd_cgroup"].message
    assert rows["containerd_default_runtime"].status == "pass"
    assert rows["containerd_running"].status == "pass"
