"""The package database read that lets a converged node skip apt/dnf (plugins/filter/package_state.py)."""

from __future__ import annotations

import subprocess

import pytest

from tests.unit.test_ansible_filters import plugin

package_filters = plugin("package_state")

PINNED = "535.216.03-2~bpo12+1"
# Recorded from a lab node: a held driver, containerd installed but not held, a package whose
# unpack a power loss interrupted, and one removed with its configuration kept.
DPKG_LINES = [
    f"nvidia-smi\t{PINNED}\thold\tinstalled",
    f"libnvidia-ml1\t{PINNED}\thold\tinstalled",
    "containerd\t1.6.20~ds1-1+deb12u3\tinstall\tinstalled",
    f"nvidia-alternative\t{PINNED}\tinstall\thalf-installed",
    "nvidia-persistenced\t535.171.04-1\tdeinstall\tconfig-files",
    "dpkg-audit The following packages are only half configured, probably due to problems",
]


def test_the_query_output_becomes_one_state_per_package() -> None:
    state = package_filters.package_state(DPKG_LINES)
    assert set(state) == {"nvidia-smi", "libnvidia-ml1", "containerd", "nvidia-alternative", "nvidia-persistenced"}
    assert state["nvidia-smi"] == {"version": PINNED, "selection": "hold", "installed": True}
    assert state["nvidia-alternative"]["installed"] is False
    assert state["nvidia-persistenced"] == {"version": "535.171.04-1", "selection": "deinstall", "installed": False}


def test_only_missing_half_installed_or_off_pin_packages_need_the_package_manager() -> None:
    state = package_filters.package_state(DPKG_LINES)
    wanted = ["nvidia-smi", "libnvidia-ml1", "nvidia-alternative", "nvidia-persistenced", "absent-package"]
    assert package_filters.packages_to_install(state, wanted, PINNED) == [
        "nvidia-alternative",
        "nvidia-persistenced",
        "absent-package",
    ]
    assert package_filters.packages_to_install(state, ["nvidia-smi"], "535.261.03-1") == ["nvidia-smi"]
    # Without a version any installed version will do (containerd, the persistence daemon).
    assert package_filters.packages_to_install(state, ["containerd"]) == []


def test_a_converged_node_needs_nothing() -> None:
    state = package_filters.package_state(DPKG_LINES[:2])
    packages = ["nvidia-smi", "libnvidia-ml1"]
    assert package_filters.packages_to_install(state, packages, PINNED) == []
    assert package_filters.packages_to_hold(state, packages) == []


def test_unheld_and_unknown_packages_get_held() -> None:
    state = package_filters.package_state(DPKG_LINES)
    assert package_filters.packages_to_hold(state, ["nvidia-smi", "containerd", "absent-package"]) == [
        "containerd",
        "absent-package",
    ]


def test_an_unknown_package_manager_is_named() -> None:
    with pytest.raises(ValueError, match="'zypper'"):
        package_filters.package_query(["containerd"], "zypper")


def test_the_apt_query_reads_this_hosts_real_dpkg_database() -> None:
    argv = package_filters.package_query(["dpkg", "no-such-package-here"], "apt")
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert result.returncode == 1, "dpkg-query reports the unknown package"
    state = package_filters.package_state(result.stdout.splitlines())
    assert list(state) == ["dpkg"]
    assert state["dpkg"]["installed"] is True
    assert package_filters.packages_to_install(state, ["dpkg", "no-such-package-here"]) == ["no-such-package-here"]


def test_an_installed_driver_of_another_version_is_what_site_yml_refuses_to_replace() -> None:
    state = package_filters.package_state(DPKG_LINES)
    packages = ["nvidia-smi", "libnvidia-ml1", "nvidia-alternative", "absent-package"]
    assert package_filters.packages_at_other_version(state, packages, PINNED) == {}
    # A half-installed package (a power loss) and an absent one are not a live driver.
    assert package_filters.packages_at_other_version(state, packages, "580.95.05-0ubuntu1") == {
        "nvidia-smi": PINNED,
        "libnvidia-ml1": PINNED,
    }
