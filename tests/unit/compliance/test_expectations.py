"""Expected values: derived defaults equal Ansible's rendering of the role defaults; overrides win; bad input named."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.compliance.expectations import DISTRIBUTIONS, DRIVER_DEFAULTS, ExpectationError, node_variables, resolve
from tests.unit import ansible_render

REPO = Path(__file__).resolve().parents[3]
DRIVER_DEFAULTS_FILE = REPO / "roles/nvidia_driver/defaults/main.yml"
FACTS = {
    "Debian": {"distribution": "Debian", "distribution_version": "12", "architecture": "x86_64"},
    "Ubuntu": {"distribution": "Ubuntu", "distribution_version": "22.04", "architecture": "x86_64"},
    "RedHat": {"distribution": "RedHat", "distribution_version": "9.4", "architecture": "x86_64"},
}


def ansible_renders(facts: dict[str, str], names: list[str]) -> dict[str, object]:
    """roles/nvidia_driver/defaults/main.yml as Ansible templates it for a host with these facts."""
    expression = "{" + ", ".join(f"'{name}': {name}" for name in names) + "}"
    return ansible_render.ansible_renders(expression, [DRIVER_DEFAULTS_FILE], {"ansible_facts": facts})


def test_every_jinja_default_of_the_driver_role_is_derived():
    defaults = yaml.safe_load(DRIVER_DEFAULTS_FILE.read_text())
    jinja = {name for name, value in defaults.items() if isinstance(value, str) and "{{" in value}
    assert set(DRIVER_DEFAULTS) <= jinja, "a derivation names a variable the role does not default from Jinja"
    # A repository path, and preflight's fact from the node's kernel: no expected value to derive.
    assert jinja - set(DRIVER_DEFAULTS) == {"nvidia_driver_cuda_distro", "nvidia_driver_kernel_headers_package"}


@pytest.mark.parametrize("os_id", sorted(DISTRIBUTIONS))
def test_the_derived_defaults_equal_ansibles_rendering(os_id, expect):
    expected = expect("prod", "gpu-p01.prod.example.com", os_id=os_id)
    rendered = ansible_renders(FACTS[DISTRIBUTIONS[os_id]], list(DRIVER_DEFAULTS))
    assert {name: expected[name] for name in DRIVER_DEFAULTS} == rendered


def test_an_inventory_override_wins_over_the_matrix(expect):
    expected = expect("prod", "gpu-p01.prod.example.com", nvidia_driver_package_version="535.216.03-3")
    assert expected["nvidia_driver_package_version"] == "535.216.03-3"


def test_the_suite_defaults_are_overridable(expect):
    assert expect("prod", "gpu-p01.prod.example.com", compliance_cgroup_controllers=["io"])[
        "compliance_cgroup_controllers"
    ] == ["io"]


def test_metrics_are_expected_on_gpu_nodes_only(expect):
    prod = expect("prod", "gpu-p01.prod.example.com")
    assert [target.name for target in prod.metrics] == ["limiter", "dcgm_exporter"]
    assert "cgroup_limiter_scan_duration_seconds_count" in prod.metrics[0].required_metrics
    assert "DCGM_FI_DEV_GPU_TEMP" in prod.metrics[1].required_metrics
    lab = expect("lab", "lab-node-1")
    assert lab.metrics == () and "gpu_fleet_gpu_count is 0" in lab.metrics_skip_reason
    opted_out = expect("prod", "gpu-p01.prod.example.com", compliance_expect_addon_metrics=False)
    assert opted_out.metrics == () and "compliance_expect_addon_metrics is false" in opted_out.metrics_skip_reason


def test_a_template_in_the_inventory_is_refused_by_name(inventory_host):
    hostvars = {**inventory_host("lab", "lab-node-1"), "nvidia_driver_version": "{{ other_version }}"}
    with pytest.raises(
        ExpectationError, match=r"inventories/lab: host lab-node-1: nvidia_driver_version is a template"
    ):
        node_variables("lab-node-1", hostvars, "inventories/lab")


def test_a_missing_fleet_variable_is_named_with_its_file():
    with pytest.raises(
        ExpectationError, match=r"host n1: gpu_fleet_gpu_count is not set \(group_vars/gpu_nodes/fleet.yml\)"
    ):
        node_variables("n1", {"gpu_fleet_gpu_product": ""}, "inventories/x")


def test_a_non_numeric_gpu_count_is_named():
    with pytest.raises(ExpectationError, match="gpu_fleet_gpu_count or compliance_gpu_max_temperature_c"):
        node_variables("n1", {"gpu_fleet_gpu_count": "eight", "gpu_fleet_gpu_product": ""}, "inventories/x")


def test_an_unsupported_os_is_named(inventory_host, matrix):
    variables = node_variables("lab-node-1", inventory_host("lab", "lab-node-1"), "inventories/lab")
    with pytest.raises(ExpectationError, match=r"/etc/os-release ID 'alpine' is not a supported OS"):
        resolve("lab-node-1", variables, "alpine", matrix, "inventories/lab")
