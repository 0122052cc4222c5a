"""Kernel releases: their flavour and series, and the headers metapackage the matrix gives them.

Debian and Ubuntu end the release with the flavour (6.1.0-27-cloud-amd64, 6.8.0-1015-aws,
6.12.12+bpo-amd64); RHEL marks a variant after "+" (5.14.0-503.el9.aarch64+64k) or, for older
real-time kernels, inside the release (5.14.0-284.11.1.rt14.296.el9_2.x86_64).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


class KernelHeadersError(LookupError):
    """No headers metapackage is known for this kernel; the message says what the matrix lacks."""


def kernel_series(release: str) -> str:
    """'6.1.0-27-cloud-amd64' -> '6.1'."""
    match = re.match(r"(\d+)\.(\d+)", release)
    if not match:
        raise KernelHeadersError(f"kernel {release!r} does not start with a version (major.minor)")
    return f"{match[1]}.{match[2]}"


def kernel_flavour(release: str, package_manager: str) -> str:
    """The flavour a headers metapackage is named for; '' when the release names none."""
    if package_manager == "dnf":
        if "+" in release:
            return release.rsplit("+", 1)[1]
        return "rt" if re.search(r"\.rt\d", release) else "default"
    segments = release.split("-")
    first = next((i for i, segment in enumerate(segments) if segment[:1].isalpha()), len(segments))
    return "-".join(segments[first:])


def headers_package(data: Mapping[str, Any], family: str, version: str, release: str) -> tuple[str, str]:
    """(flavour, headers metapackage) for a kernel release on a supported OS version."""
    system = data["operating_systems"][family]
    entry = data["kernel_headers"][family][version]
    flavour = kernel_flavour(release, system["package_manager"])
    key = f"kernel_headers.{family}.{version}"
    if not flavour:
        raise KernelHeadersError(f"cannot tell the flavour of kernel {release!r} (no flavour after the version)")
    series = kernel_series(release)
    if series == entry["series"]:
        table, where = entry["flavours"], f"{key}.flavours"
    else:
        table, where = entry.get("hwe_flavours", {}), f"{key}.hwe_flavours"
    if flavour not in table:
        other = "" if series == entry["series"] else f" (series {series}, not {family} {version}'s {entry['series']})"
        known = ", ".join(sorted(table)) or "none"
        raise KernelHeadersError(
            f"kernel {release}{other}: flavour {flavour!r} has no headers metapackage in {where} "
            f"(known: {known}); add it to platform_matrix/matrix.yml or boot a known flavour"
        )
    return flavour, table[flavour]
