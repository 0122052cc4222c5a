"""GPU rules: minimum driver per product, Triton's compute capability and architectures, forward
compatibility only where NVIDIA supports it, and which nodes need Fabric Manager. Each boundary
is tested on both sides."""

from __future__ import annotations

import copy
from datetime import date

import pytest

from platform_matrix import check, load, node_facts, pinned_stack
from platform_matrix.matrix import parse

MATRIX = load()
# The day R535 was last supported, so that older pins fail only the rule under test.
ON = date(2026, 6, 30)


def rules(**choices: object) -> list[str]:
    return [p.rule for p in check(MATRIX, pinned_stack(MATRIX, **{"today": ON, **choices}))]


class TestMinimumDriverPerProduct:
    # [gpu-op]: "HGX B200 requires a driver container version of 570.133.20 or later".
    def test_b200_refuses_570_86(self) -> None:
        problems = check(MATRIX, pinned_stack(MATRIX, gpu_product="NVIDIA-B200", driver_version="570.86.15", today=ON))
        [problem] = [p for p in problems if p.rule == "product_driver"]
        assert "NVIDIA-B200 needs driver 570.133.20 or later, the pin is 570.86.15" in problem.message
        assert problem.fields == ("gpu_product", "driver_version")

    def test_b200_accepts_570_133_20(self) -> None:
        assert "product_driver" not in rules(gpu_product="NVIDIA-B200", driver_version="570.133.20")

    @pytest.mark.parametrize("product", ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"])
    def test_hopper_needs_the_cuda_12_0_driver(self, product: str) -> None:
        assert "product_driver" in rules(gpu_product=product, driver_version="520.61.05")
        assert "product_driver" not in rules(gpu_product=product, driver_version="525.60.13")


class TestForwardCompatibility:
    def test_r470_on_h100_through_forward_compat_is_refused(self) -> None:
        # 24.05 lists R470 for forward compatibility [triton-rn], but Hopper needs R525 [arch][cuda-rn].
        choices = {"triton_release": "24.05", "gpu_product": "NVIDIA-H100-80GB-HBM3", "cuda_forward_compat": True}
        problems = check(MATRIX, pinned_stack(MATRIX, driver_version="470.256.02", today=date(2024, 1, 1), **choices))
        product = [p for p in problems if p.rule == "product_driver"]
        assert product and "CUDA forward compatibility does not change that" in product[0].message
        assert "triton_driver" not in [p.rule for p in problems]

    def test_r535_on_h100_through_forward_compat_is_accepted(self) -> None:
        choices = {"triton_release": "24.05", "gpu_product": "NVIDIA-H100-80GB-HBM3", "cuda_forward_compat": True}
        assert rules(driver_version="535.216.03", **choices) == []

    def test_only_the_branches_the_release_lists(self) -> None:
        # 24.10 lists R470, R525 and R535; R550 is newer than those and older than the native R560.
        assert rules(triton_release="24.10", driver_version="550.163.01", cuda_forward_compat=True)[0] == (
            "triton_driver"
        )
        assert "triton_driver" not in rules(
            triton_release="24.10", driver_version="535.86.10", cuda_forward_compat=True
        )


class TestTritonGpu:
    def test_25_04_refuses_v100_compute_capability_7_0(self) -> None:
        problems = check(
            MATRIX,
            pinned_stack(
                MATRIX,
                triton_release="25.04",
                gpu_product="Tesla-V100-SXM2-32GB",
                kernel_module="proprietary",
                today=ON,
            ),
        )
        assert [p.rule for p in problems] == ["triton_gpu"]
        assert "Triton 25.04 needs compute capability 7.5 or later, not Tesla-V100-SXM2-32GB" in problems[0].message
        assert problems[0].fields == ("triton_release", "gpu_product")

    def test_25_04_accepts_t4_compute_capability_7_5(self) -> None:
        assert rules(triton_release="25.04", gpu_product="Tesla-T4") == []

    def test_24_10_still_runs_v100(self) -> None:
        assert rules(triton_release="24.10", gpu_product="Tesla-V100-SXM2-32GB", kernel_module="proprietary") == []

    @pytest.mark.parametrize("release", ["23.09", "24.05", "24.10"])
    def test_releases_before_blackwell_refuse_b200(self, release: str) -> None:
        problems = check(MATRIX, pinned_stack(MATRIX, triton_release=release, gpu_product="NVIDIA-B200", today=ON))
        assert [p.rule for p in problems] == ["triton_gpu"]
        assert "does not support NVIDIA-B200 (blackwell, compute capability 10.0)" in problems[0].message

    def test_25_04_runs_b200(self) -> None:
        assert rules(triton_release="25.04", gpu_product="NVIDIA-B200") == []


class TestFabricManager:
    @pytest.mark.parametrize(
        ("product", "count", "needed"),
        [
            ("NVIDIA-H100-80GB-HBM3", 8, True),
            ("NVIDIA-H100-80GB-HBM3", 7, False),
            ("NVIDIA-H100-80GB-HBM3", 4, False),
            ("NVIDIA-H200", 8, True),
            ("NVIDIA-B200", 8, True),
            ("NVIDIA-A100-SXM4-80GB", 8, True),
            ("NVIDIA-A100-SXM4-80GB", 4, False),
            ("NVIDIA-L4", 8, False),
            ("NVIDIA-L40S", 8, False),
            ("Tesla-V100-SXM2-32GB", 8, False),
        ],
    )
    def test_nvswitch_baseboards_need_it_and_pcie_parts_do_not(self, product: str, count: int, needed: bool) -> None:
        stack = pinned_stack(MATRIX, gpu_product=product, gpu_count=count, os_family="Ubuntu", today=ON)
        assert node_facts(MATRIX, stack)["fabric_manager_required"] is needed

    def test_every_shipped_product_says_whether_it_needs_it(self) -> None:
        assert [name for name, entry in MATRIX.data["gpu_products"].items() if "fabric_manager" not in entry] == []

    def test_a_product_without_an_entry_is_refused(self) -> None:
        data = copy.deepcopy(dict(MATRIX.data))
        del data["gpu_products"]["NVIDIA-H200"]["fabric_manager"]
        matrix = parse(data, "matrix.yml")
        problems = check(matrix, pinned_stack(matrix, gpu_product="NVIDIA-H200", gpu_count=8, today=ON))
        assert [p.rule for p in problems] == ["fabric_manager"]
        assert "NVIDIA-H200 has no fabric_manager entry in gpu_products" in problems[0].message
        assert problems[0].fields == ("gpu_product",)

    def test_a_source_without_a_fabric_manager_package_cannot_carry_nvswitch_nodes(self) -> None:
        choices = {"gpu_product": "NVIDIA-H100-80GB-HBM3", "today": ON}
        debian = check(MATRIX, pinned_stack(MATRIX, gpu_count=8, os_family="Debian", **choices))
        assert [p.rule for p in debian] == ["fabric_manager"]
        assert "which the driver source debian-nonfree does not package" in debian[0].message
        assert check(MATRIX, pinned_stack(MATRIX, gpu_count=4, os_family="Debian", **choices)) == []
        assert check(MATRIX, pinned_stack(MATRIX, gpu_count=8, os_family="Ubuntu", **choices)) == []

    def test_nvidias_sources_package_it_at_the_drivers_version(self) -> None:
        for name in ("cuda-repo-ubuntu", "cuda-repo-rhel"):
            source = MATRIX.driver_source(name)
            assert source["fabricmanager_package_version"].startswith(MATRIX.source_driver_version(name) + "-")
