"""The device plugin config follows the chosen sharing strategy (rendered for prod's MIG-capable H100s)."""

from __future__ import annotations

import pytest
import yaml

from tests.k8s_addons.addon_render import find, load_manifests, render

STRATEGIES = [
    ("none", 1, "none", None),
    ("time-slicing", 3, "none", 3),
    ("mig-single", 1, "single", None),
    ("mig-mixed", 1, "mixed", None),
]


@pytest.mark.parametrize(("sharing", "replicas", "mig_strategy", "time_slices"), STRATEGIES)
def test_default_config_matches_the_sharing_strategy(tmp_path, sharing, replicas, mig_strategy, time_slices):
    extra = {
        "k8s_addons_device_plugin_sharing": sharing,
        "k8s_addons_device_plugin_replicas": replicas,
        "k8s_addons_device_plugin_configs": {},
    }
    result = render("prod", tmp_path, extra)
    assert result.returncode == 0, result.stdout + result.stderr
    manifests = load_manifests(tmp_path)

    configs = find(manifests, "ConfigMap", "nvidia-device-plugin-configs")["data"]
    assert set(configs) == {"default"}
    config = yaml.safe_load(configs["default"])
    assert config["version"] == "v1"
    assert config["flags"]["migStrategy"] == mig_strategy
    if time_slices is None:
        assert "sharing" not in config
    else:
        assert config["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": time_slices}]
        assert config["sharing"]["timeSlicing"]["renameByDefault"] is False

    pod = find(manifests, "DaemonSet", "nvidia-device-plugin")["spec"]["template"]["spec"]
    plugin = next(c for c in pod["containers"] if c["name"] == "nvidia-device-plugin")
    env = {e["name"]: e.get("value") for e in plugin["env"]}
    assert env["CONFIG_FILE"] == "/config/config.yaml"
    added = plugin["securityContext"]["capabilities"].get("add", [])
    assert added == (["SYS_ADMIN"] if mig_strategy != "none" else [])
    assert ("NVIDIA_MIG_MONITOR_DEVICES" in env) == (mig_strategy != "none")
    for container in [*pod["initContainers"], *pod["containers"]]:
        if container["name"].startswith("config-manager"):
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["NODE_LABEL"] == "nvidia.com/device-plugin.config"
            assert env["DEFAULT_CONFIG"] == "default"
            assert "add" not in container["securityContext"]["capabilities"], "only the plugin needs SYS_ADMIN"
