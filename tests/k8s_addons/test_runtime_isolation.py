"""GPUs reach pods only through the nvidia RuntimeClass and the device plugin's volume mounts.

The toolkit on the nodes ignores NVIDIA_VISIBLE_DEVICES in unprivileged containers and reads the
device list from /dev/null mounts under /var/run/nvidia-container-devices
(roles/nvidia_container_toolkit); containerd's default runtime is runc, so a GPU pod names the
RuntimeClass whose handler is the role's nvidia runtime.
"""

from __future__ import annotations

import pytest
import yaml

from tests.k8s_addons.addon_render import ENVIRONMENTS, REPO_ROOT, containers, find, workloads

TOOLKIT_VARS = REPO_ROOT / "roles/nvidia_container_toolkit/vars/main.yml"
ALL_GPUS = "/var/run/nvidia-container-devices/all"
GPU_WORKLOADS = {"nvidia-device-plugin", "dcgm-exporter"}


def all_gpus_mounts(workload: dict) -> list[str]:
    """Containers that mount the host's /dev/null at ALL_GPUS, read-only."""
    pod = workload["spec"]["template"]["spec"]
    null_volumes = {v["name"] for v in pod["volumes"] if v.get("hostPath", {}).get("path") == "/dev/null"}
    return [
        container["name"]
        for container in containers(workload)
        for mount in container.get("volumeMounts", [])
        if mount["name"] in null_volumes and mount["mountPath"] == ALL_GPUS and mount.get("readOnly")
    ]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_runtime_class_is_the_toolkit_roles_runtime_on_gpu_nodes(rendered, env):
    handler = yaml.safe_load(TOOLKIT_VARS.read_text())["nvidia_container_toolkit_runtime_name"]
    runtime_class = find(rendered[env], "RuntimeClass", "nvidia")
    assert runtime_class["handler"] == handler
    assert runtime_class["scheduling"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_gpu_agents_run_under_the_nvidia_runtime_and_ask_for_every_gpu_by_volume_mount(rendered, env):
    for workload in workloads(rendered[env]):
        name = workload["metadata"]["name"]
        pod = workload["spec"]["template"]["spec"]
        if name not in GPU_WORKLOADS:
            assert "runtimeClassName" not in pod, f"{name} needs no GPU: it stays on runc"
            assert all_gpus_mounts(workload) == [], name
            continue
        assert pod["runtimeClassName"] == "nvidia", name
        gpu_containers = {"nvidia-device-plugin": ["nvidia-device-plugin"], "dcgm-exporter": ["dcgm-exporter"]}
        assert all_gpus_mounts(workload) == gpu_containers[name]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_device_plugin_hands_gpus_over_as_volume_mounts_and_nothing_is_privileged(rendered, env):
    daemonset = find(rendered[env], "DaemonSet", "nvidia-device-plugin")
    plugin = next(c for c in containers(daemonset) if c["name"] == "nvidia-device-plugin")
    env_vars = {e["name"]: e.get("value") for e in plugin["env"]}
    assert env_vars["DEVICE_LIST_STRATEGY"] == "volume-mounts"
    for workload in workloads(rendered[env]):
        for container in containers(workload):
            assert "NVIDIA_VISIBLE_DEVICES" not in {e["name"] for e in container.get("env", [])}, container["name"]
            assert not container["securityContext"].get("privileged"), container["name"]
