"""Bad add-on settings stop the playbook with a message that names the variable."""

from __future__ import annotations

import shutil

import pytest
import yaml

from tests.k8s_addons.addon_render import REPO_ROOT, render

CASES = [
    pytest.param(
        "staging",
        {"k8s_addons_device_plugin_sharing": "mps"},
        ["k8s_addons_device_plugin_sharing must be one of: none, time-slicing, mig-single, mig-mixed, got: mps"],
        id="unknown-strategy-argument-spec",
    ),
    pytest.param(
        "staging",
        {"k8s_addons_device_plugin_configs": {"shared": {"sharing": "mps"}}},
        ['k8s_addons_device_plugin_configs.shared.sharing: unknown sharing strategy "mps"'],
        id="unknown-strategy-in-named-config",
    ),
    pytest.param(
        "staging",
        {"k8s_addons_device_plugin_sharing": "time-slicing", "k8s_addons_device_plugin_replicas": 0},
        ["k8s_addons_device_plugin_replicas: replicas must be an integer of at least 1, got 0"],
        id="replicas-zero",
    ),
    pytest.param(
        "staging",
        {"k8s_addons_device_plugin_configs": {"time-sliced": {"sharing": "time-slicing", "replicas": -2}}},
        ["k8s_addons_device_plugin_configs.time-sliced.replicas: replicas must be an integer of at least 1, got -2"],
        id="replicas-negative-named",
    ),
    pytest.param(
        "staging",
        {"k8s_addons_device_plugin_sharing": "mig-mixed"},
        [
            "k8s_addons_device_plugin_sharing: mig-mixed on gpu-s01.staging.example.com",
            "MIG mixed needs a MIG-capable GPU; NVIDIA-L4 is not",
        ],
        id="mig-mixed-on-l4",
    ),
    pytest.param(
        "prod",
        {"gpu_fleet_gpu_product": "NVIDIA-X1"},
        ['gpu_fleet_gpu_product of gpu-p01.prod.example.com: "NVIDIA-X1" is not in gpu_products'],
        id="product-unknown-to-the-matrix",
    ),
    pytest.param(
        "lab",
        {"k8s_addons_device_plugin_sharing": "mig-single"},
        ["k8s_addons_device_plugin_sharing: mig-single needs GPU nodes with a MIG-capable product"],
        id="mig-without-gpu-nodes",
    ),
    pytest.param(
        "prod",
        # Extra vars reach every host's variables, as a host_vars file would for one node.
        {"k8s_addons_node_device_plugin_config": "gone"},
        ['k8s_addons_node_device_plugin_config of gpu-p01.prod.example.com: no device plugin config named "gone"'],
        id="node-picks-unknown-config",
    ),
    pytest.param(
        "prod",
        {"k8s_addons_render_dir": ""},
        ["k8s_addons_render_dir: empty; the render needs the directory to write to"],
        id="render-without-dir",
    ),
    pytest.param(
        "prod",
        # Argo CD applies the add-ons: the playbook has no apply mode, and a stale one is refused
        # rather than ignored (a user would believe the cluster changed).
        {"k8s_addons_mode": "apply"},
        ["value of k8s_addons_mode must be one of: render, got: apply"],
        id="apply-mode-removed",
    ),
]


@pytest.mark.parametrize(("inventory", "extra", "messages"), CASES)
def test_bad_input_fails_naming_the_variable(tmp_path, inventory, extra, messages):
    result = render(inventory, tmp_path / "out", extra)
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0, output
    for message in messages:
        assert message in output
    assert not (tmp_path / "out").exists(), "nothing may be rendered when the settings are wrong"


def test_a_placeholder_left_where_the_hosts_go_is_refused_naming_the_inventory(tmp_path):
    """scripts/new-environment's hosts.yml before it is filled: no Node may be rendered for it."""
    inventory = tmp_path / "edge"
    shutil.copytree(REPO_ROOT / "inventories/prod", inventory)
    placeholder = "<fill: the hosts of group gpu_nodes>"
    hosts = {"all": {"children": {"gpu_nodes": {"hosts": placeholder}}}}
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts), encoding="utf-8")
    result = render(str(inventory), tmp_path / "out")
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0, output
    assert f"hosts.yml of {inventory}: a placeholder where the hosts go, {placeholder}" in output
    assert not (tmp_path / "out").exists()
