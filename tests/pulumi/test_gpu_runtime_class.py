"""Triton's pods that ask for GPUs run under RuntimeClass nvidia, the class roles/k8s_addons renders:
containerd's default runtime is runc, and the device plugin hands GPUs over as volume mounts that
only the nvidia runtime reads (roles/nvidia_container_toolkit)."""

from pathlib import Path

import pytest
import yaml
from gpu_serving.config import from_stack_file
from gpu_serving.triton import triton_pod_template

ROOT = Path(__file__).resolve().parents[2]
ADDONS_CLASS = yaml.safe_load((ROOT / "roles/k8s_addons/defaults/main.yml").read_text())["k8s_addons_runtime_class"]


@pytest.mark.parametrize(("env", "gpus"), [("dev", False), ("staging", True), ("prod", True)])
def test_a_triton_pod_with_gpus_names_the_addons_runtime_class(env, gpus):
    spec = triton_pod_template(from_stack_file(env))["spec"]
    (container,) = spec["containers"]
    assert ("nvidia.com/gpu" in container["resources"]["limits"]) is gpus
    assert spec.get("runtimeClassName") == (ADDONS_CLASS if gpus else None)


@pytest.mark.parametrize("inventory", ["lab", "staging", "prod"])
def test_every_addons_render_defines_that_runtime_class(inventory):
    manifests = yaml.safe_load_all((ROOT / "deploy/addons" / inventory / "10-device-plugin.yaml").read_text())
    classes = [doc["metadata"]["name"] for doc in manifests if doc and doc["kind"] == "RuntimeClass"]
    assert classes == [ADDONS_CLASS]
