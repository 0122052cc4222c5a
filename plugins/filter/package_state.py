"""Read the package database once per role, so that a converged node runs no package module.

A role queries its packages with one command (`package_query`), parses the answer
(`package_state`) and runs the package manager only for what differs from the pin
(`packages_to_install`, `packages_to_hold`). On a converged node that replaces an apt or
dnf module run, which loads the whole package cache, and a dpkg_selections run per package.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypedDict

# One line per package: name, version, selection (install/hold/deinstall/purge), status. The
# tools expand the \t and \n escapes themselves. rpm has no selections (dnf versionlock keeps
# the pin there), so every installed rpm reads as "install".
QUERIES = {
    "apt": ["dpkg-query", "--show", r"--showformat=${Package}\t${Version}\t${db:Status-Want}\t${db:Status-Status}\n"],
    "dnf": ["rpm", "--query", r"--queryformat=%{NAME}\t%{VERSION}-%{RELEASE}\tinstall\tinstalled\n"],
}


class PackageState(TypedDict):
    version: str
    selection: str
    installed: bool


def package_query(packages: Iterable[str], pkg_mgr: str) -> list[str]:
    """The argv that prints one tab-separated line per installed (or known) package."""
    if pkg_mgr not in QUERIES:
        raise ValueError(f"package_query: no query for the package manager {pkg_mgr!r} (known: {sorted(QUERIES)})")
    return [*QUERIES[pkg_mgr], *packages]


def package_state(lines: Iterable[str]) -> dict[str, PackageState]:
    """{package: state} from the query's output; lines of any other shape are ignored."""
    state: dict[str, PackageState] = {}
    for line in lines:
        fields = line.rstrip("\n").split("\t")
        if len(fields) != 4 or not fields[0]:
            continue
        name, version, selection, status = fields
        state[name] = {"version": version, "selection": selection, "installed": status == "installed"}
    return state


def packages_to_install(state: dict[str, PackageState], packages: Iterable[str], version: str = "") -> list[str]:
    """The packages that are not installed, or (with `version`) installed at another version."""
    missing = []
    for package in packages:
        current = state.get(package)
        if current is None or not current["installed"] or (version and current["version"] != version):
            missing.append(package)
    return missing


def packages_at_other_version(state: dict[str, PackageState], packages: Iterable[str], version: str) -> dict[str, str]:
    """{package: installed version} for the packages installed at a version other than `version`."""
    return {
        package: current["version"]
        for package in packages
        if (current := state.get(package)) is not None and current["installed"] and current["version"] != version
    }


def packages_to_hold(state: dict[str, PackageState], packages: Iterable[str]) -> list[str]:
    """The packages whose dpkg selection is not hold yet."""
    return [package for package in packages if state.get(package, {}).get("selection") != "hold"]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "package_query": package_query,
            "package_state": package_state,
            "packages_to_install": packages_to_install,
            "packages_to_hold": packages_to_hold,
            "packages_at_other_version": packages_at_other_version,
        }
