"""The platform matrix: the file's own checks, and every compatibility rule."""

from __future__ import annotations

import copy
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import yaml

from platform_matrix import DEFAULT_PATH, MatrixError, Stack, check, load, node_facts, pinned_stack
from platform_matrix.__main__ import main as cli
from platform_matrix.compat import RULES
from platform_matrix.matrix import parse

REPO = Path(__file__).resolve().parents[2]
MATRIX = load()
# The rules below other than the lifecycle are judged on R535's last supported day, so that they do
# not depend on the calendar (tests/unit/test_matrix_lifecycle.py judges the lifecycle itself).
ON = date(2026, 6, 30)


def raw() -> dict[str, Any]:
    return copy.deepcopy(yaml.safe_load(DEFAULT_PATH.read_text()))


def stack(**choices: object) -> Stack:
    return pinned_stack(MATRIX, **{"today": ON, **choices})


def rules_broken(**choices: object) -> list[str]:
    return [problem.rule for problem in check(MATRIX, stack(**choices))]


# --- the file -------------------------------------------------------------------------------


def test_the_repository_matrix_is_valid_and_its_own_pins_are_compatible() -> None:
    assert check(MATRIX, pinned_stack(MATRIX)) == []


# Each fleet on each OS its nodes may run, today: the lab is Debian 12 (R535 under its waiver),
# staging and prod run R580 from NVIDIA's repository on Ubuntu or RHEL 9.
FLEET_SYSTEMS = {
    "lab": [("Debian", "12", "6.1.0-27-cloud-amd64")],
    "staging": [("Ubuntu", "22.04", "5.15.0-119-generic"), ("Ubuntu", "24.04", "6.8.0-45-generic"),
                ("RedHat", "9", "5.14.0-503.11.1.el9_5.x86_64")],
    "prod": [("Ubuntu", "22.04", "6.8.0-45-generic"), ("Ubuntu", "24.04", "6.8.0-1015-aws"),
             ("RedHat", "9", "5.14.0-503.11.1.el9_5.x86_64")],
}  # fmt: skip


def fleet_stack(inventory: str, family: str, version: str, kernel: str, today: date | None = None) -> Stack:
    fleet = yaml.safe_load((REPO / f"inventories/{inventory}/group_vars/gpu_nodes/fleet.yml").read_text())
    return pinned_stack(
        MATRIX,
        triton_release=fleet["gpu_fleet_triton_release"],
        gpu_product=fleet["gpu_fleet_gpu_product"] or None,
        gpu_count=fleet["gpu_fleet_gpu_count"],
        cuda_forward_compat=fleet["gpu_fleet_cuda_forward_compat"],
        driver_eol_waiver=fleet.get("gpu_fleet_driver_eol_waiver"),
        fleet_driver_branch=fleet.get("gpu_fleet_driver_branch") or None,
        os_family=family,
        os_version=version,
        kernel_release=kernel,
        today=today,
    )


@pytest.mark.parametrize(
    ("inventory", "system"), [(name, system) for name, systems in FLEET_SYSTEMS.items() for system in systems]
)
def test_every_fleet_in_the_inventories_is_compatible(inventory: str, system: tuple[str, str, str]) -> None:
    assert check(MATRIX, fleet_stack(inventory, *system)) == []


def test_the_example_fleets_run_r580_from_nvidias_repository_and_prod_gets_fabric_manager() -> None:
    prod = fleet_stack("prod", "Ubuntu", "22.04", "6.8.0-45-generic")
    assert (prod.driver_source, prod.driver_version) == ("cuda-repo-ubuntu", "580.105.08")
    assert node_facts(MATRIX, prod)["fabric_manager_required"] is True
    staging = fleet_stack("staging", "RedHat", "9", "5.14.0-503.11.1.el9_5.x86_64")
    assert (staging.driver_source, staging.driver_version) == ("cuda-repo-rhel", "580.105.08")
    assert node_facts(MATRIX, staging)["fabric_manager_required"] is False


def test_a_debian_node_in_prod_is_refused_for_its_branch_and_fabric_manager() -> None:
    # Debian's R535: past its end of life, not the fleet's R580, below Triton 24.05's R545, and no fabric manager.
    problems = check(MATRIX, fleet_stack("prod", "Debian", "12", "6.1.0-27-amd64"))
    assert {p.rule for p in problems} == {"triton_driver", "driver_lifecycle", "fleet_branch", "fabric_manager"}


def test_the_lab_needs_its_waiver_once_r535_is_past_its_end_of_life() -> None:
    lab = fleet_stack("lab", "Debian", "12", "6.1.0-27-cloud-amd64", today=date(2026, 7, 1))
    assert lab.driver_version == "535.216.03"
    assert check(MATRIX, lab) == []
    unwaived = pinned_stack(MATRIX, **{**lab.__dict__, "driver_eol_waiver": None})
    assert [p.rule for p in check(MATRIX, unwaived)] == ["driver_lifecycle"]


def mutate(path: str, value: object) -> dict[str, Any]:
    data = raw()
    *parents, last = path.split(".")
    target = data
    for key in parents:
        target = target[key]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "key", "reason"),
    [
        ("nvidia_driver.version", 535, "nvidia_driver.version", "is not of type 'string'"),
        ("nvidia_driver.version", "r535", "nvidia_driver.version", "does not match"),
        ("kubernetes", KeyError, "", "'kubernetes' is a required property"),
        ("nvidia_driver.kernel_module", "closed", "nvidia_driver.kernel_module", "is not one of"),
        ("images.device_plugin.tag", "latest", "images.device_plugin.tag", "should not be valid"),
        ("images.device_plugin.digest", "sha256:abc", "images.device_plugin.digest", "does not match"),
        ("charts.argo-cd.version", "8.x", "charts.argo-cd.version", "does not match"),
        ("triton.releases.23.09.min_driver_branch", "535", "triton.releases.23.09.min_driver_branch", "not of type"),
        ("triton.spare", 1, "triton", "Additional properties are not allowed"),
        ("triton.default_release", "22.01", "triton.default_release", "is not one of triton.releases"),
        ("triton.releases.24.10.min_driver_branch", 530, "triton.releases.24.10.min_driver_branch", "older than"),
        ("triton.releases.23.09.forward_compat", ["550.54"], "triton.releases.23.09.forward_compat.0", "not older"),
        ("triton.releases.24.05.server_version", "v2.46.0", "triton.releases.24.05.server_version", "does not match"),
        ("triton.releases.24.10.server_version", "2.50.0", "serving_lab.triton.server_version", "not the server"),
        ("operating_systems.Debian.driver_source", "ppa", "operating_systems.Debian.driver_source", "is not one of"),
        (
            "nvidia_driver.sources.debian-nonfree.package_version",
            "535.261.03-1",
            "nvidia_driver.sources.debian-nonfree.package_version",
            "does not package the driver 535.216.03 of this source",
        ),
        (
            "nvidia_driver.sources.cuda-repo-ubuntu.fabricmanager_package_version",
            "580.95.05-1",
            "nvidia_driver.sources.cuda-repo-ubuntu.fabricmanager_package_version",
            "does not package the driver 580.105.08",
        ),
        (
            "nvidia_driver.sources.cuda-repo-ubuntu.fabricmanager_package_version",
            KeyError,
            "nvidia_driver.sources.cuda-repo-ubuntu",
            "'fabricmanager_package_version' is a dependency of 'fabricmanager_package'",
        ),
        (
            "nvidia_driver.sources.cuda-repo-rhel.dnf_module.streams.open",
            "570-open",
            "nvidia_driver.sources.cuda-repo-rhel.dnf_module.streams.open",
            "is not a stream of R580",
        ),
        ("nvidia_driver.version", "590.44.01", "nvidia_driver.version", "R590 has no entry in nvidia_driver.branches"),
        ("nvidia_driver.branches.580.end_of_life", "2028-13", "nvidia_driver.branches.580.end_of_life", "not valid"),
        (
            "nvidia_driver.branches.575.end_of_life",
            "2026-01",
            "nvidia_driver.branches.575.end_of_life",
            "null exactly for a new feature branch",
        ),
        ("nvidia_driver.branches", KeyError, "nvidia_driver", "'branches' is a required property"),
        (
            "gpu_products.NVIDIA-B200.fabric_manager",
            {"min_gpus": 1},
            "gpu_products.NVIDIA-B200.fabric_manager",
            "is not valid",
        ),
        ("gpu_products.NVIDIA-L4.compute_capability", 8.9, "gpu_products.NVIDIA-L4.compute_capability", "not of type"),
        ("kernel_headers.Ubuntu.24.04", KeyError, "kernel_headers.Ubuntu", "no entry for Ubuntu 24.04"),
        ("kernel_headers.Gentoo", {"1": {"series": "6.6", "flavours": {"x": "y"}}}, "kernel_headers.Gentoo", "not one"),
        (
            "kernel_headers.Debian.12.flavours",
            {"Cloud_AMD64": "linux-headers-cloud-amd64"},
            "kernel_headers.Debian.12.flavours",
            "does not match",
        ),
        ("gpu_products.NVIDIA-L4.architecture", "lovelace", "gpu_products.NVIDIA-L4.architecture", "is not one of"),
        ("container_toolkit.version", "1.16.0", "container_toolkit.version", "below min_version"),
        ("kubernetes.version", "1.29.0", "kubernetes.version", "not in supported_minors"),
        ("container_base.packages", ["python3-venv"], "container_base.packages", "does not contain"),
        ("container_base.python_package_minimum", "3.11.2", "container_base.python_package_minimum", "match"),
        (
            "container_base.python_version",
            "3.11.9",
            "container_base.python_package_minimum",
            "does not package Python 3.11.9",
        ),
    ],
)
def test_a_malformed_matrix_is_rejected_with_file_key_and_reason(
    path: str, value: object, key: str, reason: str
) -> None:
    # "23.09", "24.04" and "12" are single keys; the dotted path splits them, so rebuild those.
    data = raw()
    if path.startswith("triton.releases."):
        release, field = path.removeprefix("triton.releases.").rsplit(".", 1)
        data["triton"]["releases"][release][field] = value
    elif path == "kernel_headers.Ubuntu.24.04":
        del data["kernel_headers"]["Ubuntu"]["24.04"]
    elif path == "kernel_headers.Debian.12.flavours":
        data["kernel_headers"]["Debian"]["12"]["flavours"] = value
    else:
        data = mutate(path, value)
    with pytest.raises(MatrixError) as caught:
        parse(data, "matrix.yml")
    assert caught.value.path == "matrix.yml"
    assert caught.value.key == key
    assert reason in caught.value.reason
    assert str(caught.value).startswith(f"matrix.yml: {key or '<top level>'}: ")


def test_unreadable_and_unparsable_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(MatrixError, match="cannot read the file"):
        load(tmp_path / "missing.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("kubernetes:\n  version: [1.33\n")
    with pytest.raises(MatrixError, match=r"bad.yml: <top level>: not valid YAML at line \d+, column \d+"):
        load(bad)


# --- the rules ------------------------------------------------------------------------------


def test_every_rule_is_covered_here() -> None:
    covered = {
        "triton_driver", "product_driver", "triton_gpu", "driver_lifecycle", "fleet_branch", "fabric_manager",
        "kernel_headers", "kernel_module", "toolkit_version", "kubernetes_version", "mig_strategy",
        "operating_system",
    }  # fmt: skip
    assert {rule.__name__ for rule in RULES} == covered


class TestTritonDriver:
    def test_native_branch_is_enough(self) -> None:
        assert rules_broken(triton_release="23.09", driver_version="535.216.03") == []

    def test_newer_branch_is_fine(self) -> None:
        assert rules_broken(triton_release="25.04", driver_version="580.105.08") == []

    def test_below_the_minimum_without_forward_compat(self) -> None:
        problems = check(MATRIX, stack(triton_release="24.10", driver_version="535.216.03"))
        assert [p.rule for p in problems] == ["triton_driver"]
        assert "needs driver R560" in problems[0].message
        assert "not enabled" in problems[0].message
        assert problems[0].fields == ("triton_release", "driver_version")

    def test_forward_compat_on_a_data_center_gpu(self) -> None:
        assert rules_broken(triton_release="24.05", gpu_product="NVIDIA-H100-80GB-HBM3", cuda_forward_compat=True) == []

    def test_forward_compat_needs_the_minimum_build_of_the_branch(self) -> None:
        problems = check(MATRIX, stack(triton_release="24.05", driver_version="535.54.03", cuda_forward_compat=True))
        assert [p.rule for p in problems] == ["triton_driver"]
        assert "needs 535.86 or later" in problems[0].message

    def test_a_branch_that_is_not_forward_compatible(self) -> None:
        problems = check(MATRIX, stack(triton_release="24.10", driver_version="550.54.15"))
        assert "R550 is not forward compatible" in problems[0].message

    def test_forward_compat_refuses_a_non_data_center_gpu(self) -> None:
        data = raw()
        data["gpu_products"]["GeForce-RTX-4090"] = {
            "architecture": "ada",
            "compute_capability": "8.9",
            "datacenter": False,
            "mig": False,
            "fabric_manager": False,
        }
        matrix = parse(data, "matrix.yml")
        choices = {"triton_release": "24.05", "gpu_product": "GeForce-RTX-4090", "cuda_forward_compat": True}
        compat = pinned_stack(matrix, driver_version="535.216.03", today=ON, **choices)
        assert "needs a data center GPU" in check(matrix, compat)[0].message

    def test_unknown_release(self) -> None:
        problems = check(MATRIX, stack(triton_release="99.01"))
        assert problems[0].rule == "triton_driver"
        assert "'99.01' is not in the matrix" in problems[0].message
        assert problems[0].fields == ("triton_release",)


class TestProductDriver:
    def test_unknown_product(self) -> None:
        problems = check(MATRIX, stack(gpu_product="NVIDIA-Z100"))
        assert [p.rule for p in problems] == ["gpu_product"]
        assert "known:" in problems[0].message


class TestKernelModule:
    def test_open_modules_need_turing_or_later(self) -> None:
        assert rules_broken(gpu_product="Tesla-V100-SXM2-32GB", kernel_module="open") == ["kernel_module"]

    def test_blackwell_needs_open_modules(self) -> None:
        assert "kernel_module" in rules_broken(
            gpu_product="NVIDIA-B200", kernel_module="proprietary", driver_version="570.133.20"
        )

    def test_hopper_runs_either(self) -> None:
        for flavour in ("open", "proprietary"):
            assert rules_broken(gpu_product="NVIDIA-H100-80GB-HBM3", kernel_module=flavour) == []


class TestToolkit:
    def test_security_floor(self) -> None:
        assert rules_broken(container_toolkit="1.17.3") == ["toolkit_version"]

    def test_cgroup_v2_floor(self) -> None:
        assert rules_broken(container_toolkit="1.11.0") == ["toolkit_version", "toolkit_cgroup_v2"]

    def test_cgroup_v2_floor_applies_only_on_cgroup_v2(self) -> None:
        assert check(MATRIX, Stack(container_toolkit="1.11.0", cgroup_v2=False))[0].rule == "toolkit_version"
        assert len(check(MATRIX, Stack(container_toolkit="1.11.0", cgroup_v2=False))) == 1


class TestKubernetes:
    def test_outside_the_supported_minors(self) -> None:
        assert rules_broken(kubernetes_version="1.29.4") == ["kubernetes_version"]

    def test_inside(self) -> None:
        assert rules_broken(kubernetes_version="1.31.0") == []


class TestMig:
    def test_unknown_strategy(self) -> None:
        assert rules_broken(mig_strategy="dynamic") == ["mig_strategy"]

    def test_mig_on_a_gpu_without_mig(self) -> None:
        assert rules_broken(mig_strategy="mixed", gpu_product="NVIDIA-L4") == ["mig_strategy"]

    def test_mig_on_hopper(self) -> None:
        assert rules_broken(mig_strategy="single", gpu_product="NVIDIA-H100-80GB-HBM3") == []


class TestOperatingSystem:
    def test_unknown_family(self) -> None:
        assert rules_broken(os_family="Gentoo") == ["operating_system"]

    def test_unsupported_version(self) -> None:
        problems = check(MATRIX, stack(os_family="Ubuntu", os_version="20.04"))
        assert "Ubuntu 20.04 is not supported" in problems[0].message

    def test_supported(self) -> None:
        assert rules_broken(os_family="Debian", os_version="12") == []


# --- what others read -----------------------------------------------------------------------


def test_image_references_add_the_digest_once_known() -> None:
    data = raw()
    assert (
        MATRIX.image("device_plugin")
        == f"{data['images']['device_plugin']['repository']}:" + data["images"]["device_plugin"]["tag"]
    )
    digest = "sha256:" + "a" * 64
    data["images"]["device_plugin"]["digest"] = digest
    data["triton"]["releases"]["23.09"]["digest"] = digest
    matrix = parse(data, "matrix.yml")
    assert matrix.image("device_plugin").endswith("@" + digest)
    assert matrix.triton_image("23.09") == f"nvcr.io/nvidia/tritonserver:23.09-py3@{digest}"


def test_cli_exit_codes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli(["check"]) == 0
    assert cli(["check", "--triton", "24.10", "--driver", "535.216.03", "--date", "2026-06-30"]) == 1
    assert "[triton_driver]" in capsys.readouterr().err
    assert cli(["check", "--os-family", "Debian", "--os-version", "12", "--date", "2026-07-01"]) == 1
    assert "[driver_lifecycle] R535 (long-term support branch) reached its end of life" in capsys.readouterr().err
    assert cli(["check", "--os-family", "Ubuntu", "--os-version", "24.04", "--kernel", "6.8.0-45-generic"]) == 0
    bad = tmp_path / "m.yml"
    bad.write_text("schema_version: 2\n")
    assert cli(["check", "--file", str(bad)]) == 2
