"""Bad input that preflight refuses before any change, for the offline run and the lab VM.

tests/unit/test_preflight_refusals.py runs every case against a recording of the lab node;
tests/lab/test_bad_input.py runs the cases marked `on_vm` against a real lab VM.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from platform_matrix import DEFAULT_PATH


@dataclass(frozen=True)
class BadInput:
    name: str
    extra: dict[str, object]  # extra vars; a value "@<name>" is a matrix file of matrix_variants
    expected: str  # text the failure message must contain
    on_vm: bool = False  # also run on a real lab VM
    # Further problems the same input finds with the lab inventory on the lab node (the message
    # lists every problem; the offline run checks there are no others).
    also_found: tuple[str, ...] = ()

    def extra_vars(self, variants: dict[str, str]) -> dict[str, object]:
        """The extra vars with each "@<name>" replaced by the path of that matrix file."""
        return {k: variants.get(v, v) if isinstance(v, str) else v for k, v in self.extra.items()}


CASES: tuple[BadInput, ...] = (
    BadInput("gpu count not an int", {"gpu_fleet_gpu_count": "eight"}, "gpu_fleet_gpu_count", on_vm=True),
    BadInput("forward compat not a bool", {"gpu_fleet_cuda_forward_compat": "maybe"}, "gpu_fleet_cuda_forward_compat"),
    BadInput("pools not a list", {"gpu_fleet_pools": {"pool": "serving"}}, "gpu_fleet_pools"),
    BadInput("unknown kernel module", {"nvidia_driver_kernel_module": "closed"}, "nvidia_driver_kernel_module"),
    BadInput("unknown driver source", {"nvidia_driver_source": "ppa"}, "nvidia_driver_source"),
    BadInput("unknown toolkit source", {"nvidia_container_toolkit_source": "pip"}, "nvidia_container_toolkit_source"),
    BadInput("hold not a bool", {"nvidia_driver_hold": "sometimes"}, "nvidia_driver_hold"),
    BadInput("missing driver pin", {"nvidia_driver_version": ""}, "nvidia_driver_version (preflight_driver_version)"),
    BadInput(
        "driver below the Triton minimum",
        {"gpu_fleet_triton_release": "24.10"},
        "gpu_fleet_triton_release, nvidia_driver_version: [triton_driver]",
        on_vm=True,
    ),
    BadInput(
        "old driver branch",
        {"nvidia_driver_version": "470.256.02"},
        "nvidia_driver_version: [triton_driver]",
        also_found=("[driver_lifecycle] R470 is past its end of life",),
    ),
    BadInput(
        "unknown Triton release", {"gpu_fleet_triton_release": "99.99"}, "gpu_fleet_triton_release: [triton_driver]"
    ),
    BadInput("unknown GPU product", {"gpu_fleet_gpu_product": "NVIDIA-Z100"}, "gpu_fleet_gpu_product: [gpu_product]"),
    BadInput(
        "toolkit below the security floor",
        {"nvidia_container_toolkit_version": "1.11.0"},
        "nvidia_container_toolkit_version: [toolkit_version]",
        also_found=("nvidia_container_toolkit_version: [toolkit_cgroup_v2]",),
    ),
    BadInput(
        "proprietary module on Blackwell",
        {"gpu_fleet_gpu_product": "NVIDIA-B200", "nvidia_driver_kernel_module": "proprietary"},
        "nvidia_driver_kernel_module, gpu_fleet_gpu_product: [kernel_module]",
        also_found=("[product_driver] NVIDIA-B200 needs driver", "[triton_gpu] Triton 23.09"),
    ),
    BadInput(
        "GPUs declared, none present",
        {"gpu_fleet_gpu_count": 4, "gpu_fleet_gpu_product": "NVIDIA-L4"},
        "gpu_fleet_gpu_count: the inventory declares 4 GPUs, the PCI bus shows 0",
        on_vm=True,
        # Declared GPUs make DKMS's headers required, and the lab node (no GPU) has none.
        also_found=("kernel headers: /lib/modules/",),
    ),
    BadInput("not enough disk", {"preflight_min_free_gb": 100000}, "preflight_min_free_gb: / has"),
    BadInput(
        "typo in a fleet variable",
        {"gpu_fleet_gpu_cont": 0},
        "gpu_fleet_gpu_cont: no role declares this variable (did you mean gpu_fleet_gpu_count?)",
    ),
    BadInput("typo in a role variable", {"nvidia_driver_hodl": False}, "did you mean nvidia_driver_hold?"),
    BadInput(
        "unsupported OS",
        {"preflight_platform_matrix_file": "@no-debian"},
        "ansible_facts.distribution, ansible_facts.distribution_version: [operating_system] OS family 'Debian'",
    ),
    BadInput(
        "malformed platform matrix",
        {"preflight_platform_matrix_file": "@broken"},
        "nvidia_driver.version: 535 is not of type 'string'",
    ),
    BadInput(
        "end-of-life branch without a waiver",
        {"gpu_fleet_driver_eol_waiver": {}},
        "nvidia_driver_version, gpu_fleet_driver_eol_waiver: [driver_lifecycle] R535 (long-term support branch)",
    ),
    BadInput(
        "GPU product without a fabric-manager entry",
        {"gpu_fleet_gpu_product": "NVIDIA-H100-80GB-HBM3", "preflight_platform_matrix_file": "@no-fabric-manager"},
        "gpu_fleet_gpu_product: [fabric_manager] NVIDIA-H100-80GB-HBM3 has no fabric_manager entry",
    ),
    BadInput(
        "kernel flavour without a headers package",
        {"preflight_platform_matrix_file": "@no-lab-flavour"},
        "ansible_facts.kernel: [kernel_headers] kernel ",
    ),
)


def matrix_variants(directory: Path) -> dict[str, str]:
    """Matrix files for the cases that need one, written under `directory`: without Debian, with a
    wrong type, with an H100 that does not say whether it needs Fabric Manager, and with no
    Debian 12 flavour the lab's amd64 VM runs. {"@<name>": path}."""
    matrix = yaml.safe_load(DEFAULT_PATH.read_text())
    no_debian = {
        **matrix,
        "operating_systems": {k: v for k, v in matrix["operating_systems"].items() if k != "Debian"},
        "kernel_headers": {k: v for k, v in matrix["kernel_headers"].items() if k != "Debian"},
    }
    broken = {**matrix, "nvidia_driver": {**matrix["nvidia_driver"], "version": 535}}
    h100 = {k: v for k, v in matrix["gpu_products"]["NVIDIA-H100-80GB-HBM3"].items() if k != "fabric_manager"}
    no_fabric_manager = {**matrix, "gpu_products": {**matrix["gpu_products"], "NVIDIA-H100-80GB-HBM3": h100}}
    debian_12 = {"series": "6.1", "flavours": {"rt-arm64": "linux-headers-rt-arm64"}}
    no_lab_flavour = {**matrix, "kernel_headers": {**matrix["kernel_headers"], "Debian": {"12": debian_12}}}
    paths = {}
    for name, data in (
        ("@no-debian", no_debian),
        ("@broken", broken),
        ("@no-fabric-manager", no_fabric_manager),
        ("@no-lab-flavour", no_lab_flavour),
    ):
        path = directory / f"{name[1:]}.yml"
        path.write_text(yaml.safe_dump(data))
        paths[name] = str(path)
    return paths
