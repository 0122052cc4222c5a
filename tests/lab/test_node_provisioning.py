"""site.yml on a real lab VM: check mode, convergence, idempotence, the driver pin holding, and
containerd's nvidia runtime in a drop-in that leaves the site's config.toml its own."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from tests.lab import fresh_node
from tests.lab.conftest import FreshProofs, LabNode, changed_tasks, stats
from tests.lab.play_report import assert_succeeded

pytestmark = pytest.mark.lab

PINNED = fresh_node.PINNED
PACKAGES = fresh_node.PACKAGES
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
IMPORTS_LINE = 'imports = ["/etc/containerd/conf.d/*.toml"]'
DROP_IN_TASK = fresh_node.DROP_IN_TASK
# What a site adds to config.toml by hand: a registry mirror, in the CRI plugin's section.
MIRROR = (
    '[plugins."io.containerd.grpc.v1.cri".registry.mirrors."registry.lab.example"]\n'
    '  endpoint = ["https://mirror.lab.example"]\n'
)


def _debian_version_key(node: LabNode, a: str, b: str) -> bool:
    return node.run(f"dpkg --compare-versions '{a}' gt '{b}'", check=False).returncode == 0


def _containerd_cri(node: LabNode) -> dict[str, Any]:
    """The CRI plugin section of the config containerd reads: config.toml merged with its imports."""
    return tomllib.loads(node.run("containerd config dump").stdout)["plugins"]["io.containerd.grpc.v1.cri"]


def _assert_runtimes(cri: dict[str, Any]) -> None:
    runtimes = cri["containerd"]["runtimes"]
    assert cri["containerd"]["default_runtime_name"] == "runc", "pods without a RuntimeClass must run runc"
    assert set(runtimes) == {"runc", "nvidia"}, runtimes
    assert runtimes["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert all(runtimes[name]["options"]["SystemdCgroup"] is True for name in ("runc", "nvidia"))


def test_check_mode_on_the_fresh_node_predicts_the_changes(fresh_proofs: FreshProofs) -> None:
    fresh_node.judge_check({"check": fresh_proofs.run_of("check")})


def test_site_converges_the_fresh_node(fresh_proofs: FreshProofs) -> None:
    fresh_node.judge_converge({"converge": fresh_proofs.run_of("converge")})


def test_the_converged_node_holds_the_pin_and_containerd_keeps_debians_config(lab_node: LabNode) -> None:
    installed = lab_node.packages()
    for package in PACKAGES:
        assert installed[package] == (PINNED, "hold"), f"{package}: {installed.get(package)}"
    # config.toml is Debian's conffile plus one line: the rest hashes as dpkg recorded the shipped file.
    main = lab_node.run(f"cat {CONTAINERD_CONFIG}").stdout
    assert main.splitlines()[0] == IMPORTS_LINE and main.count("imports") == 1, main
    shipped = lab_node.run("dpkg-query -W -f='${Conffiles}' containerd").stdout.split()
    body = lab_node.run(f"grep -vxF '{IMPORTS_LINE}' {CONTAINERD_CONFIG} | md5sum").stdout.split()[0]
    assert shipped[shipped.index(CONTAINERD_CONFIG) + 1] == body, "the role changed more than the imports line"
    lab_node.run(f"test -f {DROP_IN}")
    cri = _containerd_cri(lab_node)
    _assert_runtimes(cri)
    assert cri["cni"]["bin_dir"] == "/usr/lib/cni", "Debian's CNI directory, from config.toml, survives the drop-in"


def test_a_site_mirror_in_config_toml_survives_site_yml_and_reaches_containerd(own_node: LabNode) -> None:
    """containerd 1.6 replaces a plugin's whole section from an import: the run after a site's edit
    carries the CRI section into the drop-in (the one change), and config.toml keeps the site's line."""
    lab_node = own_node
    lab_node.run(f"printf '%s' '{MIRROR}' >> {CONTAINERD_CONFIG}")
    rerun = lab_node.playbook("playbooks/site.yml")
    assert_succeeded(rerun)
    assert set(changed_tasks(rerun)) == {DROP_IN_TASK, "nvidia_container_toolkit : Restart containerd"}
    main = lab_node.run(f"cat {CONTAINERD_CONFIG}").stdout
    assert main.endswith(MIRROR) and main.count(IMPORTS_LINE) == 1, main
    assert "registry.lab.example" in lab_node.run(f"cat {DROP_IN}").stdout
    cri = _containerd_cri(lab_node)
    assert cri["registry"]["mirrors"]["registry.lab.example"]["endpoint"] == ["https://mirror.lab.example"]
    _assert_runtimes(cri)
    assert lab_node.run("systemctl is-active containerd").stdout.strip() == "active"


def test_a_second_run_on_the_fresh_node_changed_nothing(fresh_proofs: FreshProofs) -> None:
    fresh_node.judge_noop({"noop": fresh_proofs.run_of("noop")})


def test_a_run_on_a_node_booted_from_the_converged_image_changes_nothing(lab_node: LabNode) -> None:
    again = lab_node.playbook("playbooks/site.yml")
    assert_succeeded(again)
    assert stats(again)["changed"] == 0, f"not idempotent, changed: {changed_tasks(again)}"


def test_a_second_run_changes_nothing_without_mitogen_either(lab_node: LabNode) -> None:
    """ansible.cfg runs Mitogen; ANSIBLE_STRATEGY=linear is the documented way back to stock Ansible."""
    again = lab_node.playbook("playbooks/site.yml", env={"ANSIBLE_STRATEGY": "linear"})
    assert_succeeded(again)
    assert stats(again)["changed"] == 0, f"not idempotent under linear, changed: {changed_tasks(again)}"


def test_the_pin_and_the_hold_survive_apt_get_upgrade(own_node: LabNode) -> None:
    lab_node = own_node
    lab_node.run("apt-get update -qq", timeout=600)
    offered = lab_node.run(f"apt-cache madison {PACKAGES[0]} | awk '{{print $3}}'").stdout.split()
    newer = [v for v in offered if _debian_version_key(lab_node, v, PINNED)]
    assert newer, f"the archive offers nothing newer than {PINNED}; this test would prove nothing ({offered})"
    policy = lab_node.run(f"apt-cache policy {PACKAGES[0]}").stdout
    assert f"Candidate: {PINNED}" in policy, policy

    lab_node.run("DEBIAN_FRONTEND=noninteractive apt-get -y upgrade", timeout=1200)
    installed = lab_node.packages()
    for package in PACKAGES:
        assert installed[package] == (PINNED, "hold"), f"{package} after upgrade: {installed[package]}"

    # The preference alone also wins: without the hold, upgrade still keeps the pin.
    lab_node.run("apt-mark unhold " + " ".join(PACKAGES))
    try:
        lab_node.run("DEBIAN_FRONTEND=noninteractive apt-get -y upgrade", timeout=1200)
        installed = lab_node.packages()
        for package in PACKAGES:
            assert installed[package][0] == PINNED, f"{package} without hold: {installed[package]}"
    finally:
        lab_node.run("apt-mark hold " + " ".join(PACKAGES))
