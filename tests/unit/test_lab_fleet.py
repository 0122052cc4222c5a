"""scripts/lab without booting: image cache key, inventory and known_hosts, qemu process lookup."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lab_fleet import image, vm
from lab_fleet.cli import main as lab_cli
from lab_fleet.lab import Lab


def test_the_image_key_follows_every_input(monkeypatch: pytest.MonkeyPatch) -> None:
    base = image.image_key()
    assert image.image_key() == base
    monkeypatch.setenv("LAB_MIRROR", "http://mirror.example/debian")
    assert image.image_key() != base
    monkeypatch.delenv("LAB_MIRROR")
    monkeypatch.setattr(image, "PACKAGES", (*image.PACKAGES, "vim-tiny"))
    assert image.image_key() != base


def test_configured_tree_has_no_host_keys_and_an_enabled_seed_unit(tmp_path: Path) -> None:
    (tmp_path / "etc/ssh").mkdir(parents=True)
    (tmp_path / "etc/ssh/ssh_host_rsa_key").write_text("baked into the image")
    image._configure_tree(tmp_path)
    assert not list((tmp_path / "etc/ssh").glob("ssh_host_*"))
    link = tmp_path / "etc/systemd/system/multi-user.target.wants/lab-seed.service"
    assert link.is_symlink()
    assert (tmp_path / "etc/machine-id").read_text() == ""
    assert "deb.debian.org" in (tmp_path / "etc/apt/sources.list.d/debian.sources").read_text()


def fake_node(lab: Lab, name: str, port: int, running: bool) -> None:
    node = lab.node(name)
    node.directory.mkdir(parents=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(node.host_key)], check=True)
    node.port_file.write_text(str(port))
    if running:
        # A process whose command line names the node's disk stands in for its qemu.
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", str(node.disk)])
        node.pidfile.write_text(str(proc.pid))


def test_inventory_and_known_hosts_pin_each_node(tmp_path: Path) -> None:
    lab = Lab(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache", inventory=tmp_path / "inv/hosts.yml")
    fake_node(lab, "lab-node-1", 41001, running=True)
    fake_node(lab, "lab-node-2", 41002, running=False)
    lab._write_known_hosts()
    lab.write_inventory()
    hosts = yaml.safe_load(lab.inventory.read_text())["all"]["children"]["gpu_nodes"]["hosts"]
    assert list(hosts) == ["lab-node-1"], "a stopped node must not be in the inventory"
    node = hosts["lab-node-1"]
    assert node["ansible_host"] == "127.0.0.1" and node["ansible_port"] == 41001
    assert "StrictHostKeyChecking=yes" in node["ansible_ssh_common_args"]
    assert "HostKeyAlias=lab-node-1" in node["ansible_ssh_common_args"]
    known = (lab.state_dir / "known_hosts").read_text().splitlines()
    pub = lab.node("lab-node-1").host_key.with_suffix(".pub").read_text().split()[:2]
    assert f"lab-node-1 {pub[0]} {pub[1]}" in known
    assert [row["node"] for row in lab.status()] == ["lab-node-1", "lab-node-2"]
    assert [row["running"] for row in lab.status()] == [True, False]


def test_a_stale_pidfile_is_not_a_running_node(tmp_path: Path) -> None:
    node = vm.Node("lab-node-1", tmp_path)
    proc = subprocess.Popen(["sleep", "30"])  # alive, but not this node's qemu
    node.pidfile.write_text(str(proc.pid))
    try:
        assert node.pid() is None
    finally:
        proc.kill()


def test_cli_errors_name_the_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("LAB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("LAB_INVENTORY", str(tmp_path / "hosts.yml"))
    assert lab_cli(["ssh", "lab-node-9"]) == 1
    assert "no lab node 'lab-node-9'" in capsys.readouterr().err
    assert lab_cli(["up", "--nodes", "0"]) == 1
    assert "--nodes must be at least 1" in capsys.readouterr().err
