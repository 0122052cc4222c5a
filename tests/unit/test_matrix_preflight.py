"""What preflight asks the platform matrix, as Ansible templates it: the role's defaults and vars,
an inventory's group_vars and a node's facts go through the same filters the role's tasks call.
The messages name the variables to fix; the node facts are what roles/nvidia_driver reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.unit.ansible_render import ansible_renders

REPO = Path(__file__).resolve().parents[2]
PREFLIGHT = REPO / "roles/preflight"
DEBIAN = {"distribution": "Debian", "distribution_version": "12.8", "distribution_major_version": "12"}
UBUNTU = {"distribution": "Ubuntu", "distribution_version": "22.04", "distribution_major_version": "22"}
RHEL = {"distribution": "RedHat", "distribution_version": "9.5", "distribution_major_version": "9"}
ASKED = (
    "{'problems': preflight_matrix_choices"
    " | platform_matrix_problems(preflight_matrix_variables, preflight_platform_matrix_file),"
    " 'facts': preflight_matrix_choices | platform_matrix_node_facts(preflight_platform_matrix_file)}"
)


def preflight_asks(inventory: str, facts: dict[str, str], kernel: str, **overrides: object) -> dict[str, Any]:
    """The problems and node facts preflight gets for one node of `inventory`."""
    files = [PREFLIGHT / "defaults/main.yml", PREFLIGHT / "vars/main.yml"]
    files += sorted((REPO / f"inventories/{inventory}/group_vars/gpu_nodes").glob("*.yml"))
    return ansible_renders(ASKED, files, {"ansible_facts": {**facts, "kernel": kernel}, **overrides})


def test_the_lab_passes_on_debians_r535_under_its_waiver() -> None:
    asked = preflight_asks("lab", DEBIAN, "6.1.0-27-cloud-amd64")
    assert asked["problems"] == []
    assert asked["facts"] == {
        "driver_branch": "535",
        "driver_source": "debian-nonfree",
        "fabric_manager_required": False,
        "kernel_flavour": "cloud-amd64",
        "kernel_headers_package": "linux-headers-cloud-amd64",
    }


def test_the_bad_input_cases_of_issue_13_name_their_variables(tmp_path: Path) -> None:
    # The lab corpus (tests/lab/test_bad_input.py) runs the same three on a VM; here, the messages.
    no_waiver = preflight_asks("lab", DEBIAN, "6.1.0-27-cloud-amd64", gpu_fleet_driver_eol_waiver={})
    assert no_waiver["problems"] == [
        "nvidia_driver_version, gpu_fleet_driver_eol_waiver: [driver_lifecycle] R535 (long-term support branch) "
        "reached its end of life on 2026-06-30; pin a supported branch (R580, R595) or accept R535 explicitly "
        'with a waiver {branch: "535", reason: "..."}'
    ]
    flavour = preflight_asks("lab", DEBIAN, "6.1.0-27-foo-amd64")
    [message] = flavour["problems"]
    assert message.startswith("ansible_facts.kernel: [kernel_headers] kernel 6.1.0-27-foo-amd64: flavour 'foo-amd64'")
    assert flavour["facts"]["kernel_headers_package"] == ""
    matrix = yaml.safe_load((REPO / "platform_matrix/matrix.yml").read_text())
    del matrix["gpu_products"]["NVIDIA-H100-80GB-HBM3"]["fabric_manager"]
    variant = tmp_path / "no-fabric-manager-entry.yml"
    variant.write_text(yaml.safe_dump(matrix))
    product = preflight_asks(
        "lab",
        DEBIAN,
        "6.1.0-27-cloud-amd64",
        gpu_fleet_gpu_product="NVIDIA-H100-80GB-HBM3",
        preflight_platform_matrix_file=str(variant),
    )
    assert product["problems"] == [
        "gpu_fleet_gpu_product: [fabric_manager] NVIDIA-H100-80GB-HBM3 has no fabric_manager entry in gpu_products "
        "of the platform matrix; say whether its nodes need NVIDIA Fabric Manager (false, or {min_gpus: N} for "
        "NVSwitch baseboards)"
    ]


def test_a_prod_node_on_ubuntu_gets_r580_fabric_manager_and_the_hwe_headers() -> None:
    asked = preflight_asks("prod", UBUNTU, "6.8.0-45-generic")
    assert asked["problems"] == []
    assert asked["facts"] == {
        "driver_branch": "580",
        "driver_source": "cuda-repo-ubuntu",
        "fabric_manager_required": True,
        "kernel_flavour": "generic",
        "kernel_headers_package": "linux-headers-generic-hwe-22.04",
    }


def test_a_staging_node_on_rhel_gets_kernel_devel_matched_and_no_fabric_manager() -> None:
    asked = preflight_asks("staging", RHEL, "5.14.0-503.11.1.el9_5.x86_64")
    assert asked["problems"] == []
    assert asked["facts"]["driver_source"] == "cuda-repo-rhel"
    assert asked["facts"]["kernel_headers_package"] == "kernel-devel-matched"
    assert asked["facts"]["fabric_manager_required"] is False


def test_a_prod_inventory_on_debian_is_refused_naming_every_variable() -> None:
    problems = preflight_asks("prod", DEBIAN, "6.1.0-27-amd64")["problems"]
    prefixes = sorted(message.split(": [", 1)[0] for message in problems)
    assert prefixes == [
        "gpu_fleet_driver_branch, nvidia_driver_version",
        "gpu_fleet_gpu_product, nvidia_driver_source",
        "gpu_fleet_triton_release, nvidia_driver_version",
        "nvidia_driver_version, gpu_fleet_driver_eol_waiver",
    ]
