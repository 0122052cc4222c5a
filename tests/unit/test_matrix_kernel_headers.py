"""Kernel flavours and their headers metapackages per distribution; an unknown flavour is refused."""

from __future__ import annotations

import pytest

from platform_matrix import check, load, node_facts, pinned_stack
from platform_matrix.kernel import KernelHeadersError, headers_package, kernel_flavour, kernel_series

MATRIX = load()


@pytest.mark.parametrize(
    ("release", "manager", "flavour"),
    [
        ("6.1.0-27-amd64", "apt", "amd64"),
        ("6.1.0-27-cloud-amd64", "apt", "cloud-amd64"),
        ("6.1.0-27-rt-amd64", "apt", "rt-amd64"),
        ("6.12.12+bpo-amd64", "apt", "amd64"),
        ("5.15.0-119-generic", "apt", "generic"),
        ("6.8.0-1015-aws", "apt", "aws"),
        ("6.8.0-1008-nvidia-64k", "apt", "nvidia-64k"),
        ("6.1.0-27", "apt", ""),
        ("5.14.0-503.11.1.el9_5.x86_64", "dnf", "default"),
        ("5.14.0-503.11.1.el9_5.aarch64+64k", "dnf", "64k"),
        ("5.14.0-362.8.1.el9_3.x86_64+rt", "dnf", "rt"),
        ("5.14.0-284.11.1.rt14.296.el9_2.x86_64", "dnf", "rt"),
    ],
)
def test_the_flavour_is_read_from_the_kernel_release(release: str, manager: str, flavour: str) -> None:
    assert kernel_flavour(release, manager) == flavour


def test_the_series_is_major_minor() -> None:
    assert kernel_series("6.12.12+bpo-amd64") == "6.12"
    with pytest.raises(KernelHeadersError, match="does not start with a version"):
        kernel_series("generic")


@pytest.mark.parametrize(
    ("family", "version", "release", "package"),
    [
        ("Debian", "12", "6.1.0-27-amd64", "linux-headers-amd64"),
        ("Debian", "12", "6.1.0-27-cloud-amd64", "linux-headers-cloud-amd64"),
        ("Debian", "12", "6.1.0-27-rt-amd64", "linux-headers-rt-amd64"),
        ("Ubuntu", "22.04", "5.15.0-119-generic", "linux-headers-generic"),
        ("Ubuntu", "22.04", "6.8.0-45-generic", "linux-headers-generic-hwe-22.04"),
        ("Ubuntu", "22.04", "6.8.0-1015-aws", "linux-headers-aws"),
        ("Ubuntu", "24.04", "6.8.0-45-generic", "linux-headers-generic"),
        ("Ubuntu", "24.04", "6.11.0-19-generic", "linux-headers-generic-hwe-24.04"),
        ("RedHat", "9", "5.14.0-503.11.1.el9_5.x86_64", "kernel-devel-matched"),
        ("RedHat", "9", "5.14.0-503.11.1.el9_5.aarch64+64k", "kernel-64k-devel-matched"),
    ],
)
def test_each_known_flavour_gets_its_metapackage(family: str, version: str, release: str, package: str) -> None:
    assert headers_package(MATRIX.data, family, version, release)[1] == package


def test_a_flavour_with_no_entry_names_the_matrix_key_and_the_known_flavours() -> None:
    with pytest.raises(KernelHeadersError) as caught:
        headers_package(MATRIX.data, "Debian", "12", "6.1.0-27-foo-amd64")
    message = str(caught.value)
    assert "flavour 'foo-amd64' has no headers metapackage in kernel_headers.Debian.12.flavours" in message
    assert "(known: amd64, arm64, cloud-amd64, cloud-arm64, rt-amd64, rt-arm64)" in message


def test_a_kernel_of_another_series_needs_an_hwe_entry() -> None:
    # A bookworm-backports kernel: linux-headers-amd64 from bookworm would be 6.1's headers.
    with pytest.raises(
        KernelHeadersError, match=r"series 6\.12, not Debian 12's 6\.1.*kernel_headers\.Debian\.12\.hwe_"
    ):
        headers_package(MATRIX.data, "Debian", "12", "6.12.12+bpo-amd64")
    # Ubuntu 24.04's HWE kernels have a lowlatency GA metapackage but none for HWE in the matrix.
    with pytest.raises(KernelHeadersError, match=r"kernel_headers\.Ubuntu\.24\.04\.hwe_flavours"):
        headers_package(MATRIX.data, "Ubuntu", "24.04", "6.11.0-19-lowlatency")


def test_the_rule_names_the_kernel_and_stays_quiet_on_an_unsupported_os() -> None:
    bad = check(MATRIX, pinned_stack(MATRIX, os_family="Ubuntu", os_version="24.04", kernel_release="6.8.0-45-foo"))
    assert [p.rule for p in bad] == ["kernel_headers"]
    assert bad[0].fields == ("kernel_release",)
    good = pinned_stack(MATRIX, os_family="Ubuntu", os_version="24.04", kernel_release="6.8.0-45-generic")
    assert check(MATRIX, good) == []
    other = check(MATRIX, pinned_stack(MATRIX, os_family="Ubuntu", os_version="20.04", kernel_release="5.4.0-1-foo"))
    assert [p.rule for p in other] == ["operating_system"]


def test_node_facts_carry_the_flavour_and_package_or_empty_when_unknown() -> None:
    facts = node_facts(
        MATRIX, pinned_stack(MATRIX, os_family="Debian", os_version="12", kernel_release="6.1.0-27-cloud-amd64")
    )
    assert (facts["kernel_flavour"], facts["kernel_headers_package"]) == ("cloud-amd64", "linux-headers-cloud-amd64")
    assert (facts["driver_branch"], facts["driver_source"]) == ("535", "debian-nonfree")
    unknown = node_facts(
        MATRIX, pinned_stack(MATRIX, os_family="Debian", os_version="12", kernel_release="6.1.0-27-foo")
    )
    assert (unknown["kernel_flavour"], unknown["kernel_headers_package"]) == ("foo", "")
