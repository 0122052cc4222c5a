"""The base image: a Debian debootstrap tree (variant minbase) with Debian's Python, imported into podman.

No container registry is reachable from the machines that build the images, so nothing is pulled:
the tree comes from the Debian mirror the lab VMs use (LAB_MIRROR), as pinned in
platform_matrix/matrix.yml (container_base). The mirror has no snapshot, so the pin is checked on
the tree: the build stops unless its Python is the pinned upstream version, packaged no older
than the pinned Debian revision.

The tarball is cached in the lab's cache directory (LAB_CACHE_DIR), keyed by a hash of its inputs,
and the podman image is tagged with the same key, so an unchanged recipe is neither
debootstrapped nor imported again.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from serving.images.debian_mirrors import mirrors
from serving.images.podman import podman, podman_ok

RECIPE_VERSION = 1
BASE_REPOSITORY = "localhost/gpu-serving/base"
# Removed from the tree: caches and documentation that an image never needs.
CHROOT_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
PRUNED = ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/info", "var/log")


class BaseImageError(RuntimeError):
    pass


def base_inputs(spec: Mapping[str, Any]) -> dict[str, Any]:
    mirror, security = mirrors()
    return {
        "recipe": RECIPE_VERSION,
        "suite": spec["suite"],
        "mirror": mirror,
        "security_mirror": security,
        "packages": sorted(spec["packages"]),
        "python_package_minimum": spec["python_package_minimum"],
        "pruned": list(PRUNED),
    }


def base_key(spec: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(base_inputs(spec), sort_keys=True).encode()).hexdigest()[:16]


def base_tag(spec: Mapping[str, Any]) -> str:
    return f"{BASE_REPOSITORY}:debian{spec['debian_version']}-py{spec['python_version']}-{base_key(spec)}"


def _run(cmd: Sequence[str], log: Path, env: Mapping[str, str] | None = None) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        result = subprocess.run(list(cmd), stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    if result.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-20:]
        raise BaseImageError(f"{cmd[0]} failed (exit {result.returncode}); last lines of {log}:\n" + "\n".join(tail))


def installed_version(tree: Path, package: str) -> str | None:
    """The version of `package` in the tree's dpkg database, None when it is not installed."""
    status = (tree / "var/lib/dpkg/status").read_text()
    for stanza in status.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line[0].isspace())
        if fields.get("Package") == package and fields.get("Status", "").endswith(" installed"):
            return fields.get("Version")
    return None


def _older(version: str, than: str) -> bool:
    """Debian's own version order (epochs, revisions, +debNNuN, ~)."""
    return subprocess.run(["dpkg", "--compare-versions", version, "lt", than], check=False).returncode == 0


def check_python(tree: Path, spec: Mapping[str, Any], matrix_path: Path) -> str:
    """The tree's Python must be the pinned upstream version, packaged no older than the pin.

    Newer Debian revisions of the same upstream version (point releases, security updates) are
    taken: the mirror has no snapshot to hold an older one, and refusing them would break every
    build on the day Debian publishes a fix. Returns the package version the tree has."""
    package = "python" + ".".join(spec["python_version"].split(".")[:2])
    got = installed_version(tree, package)
    want = spec["python_package_minimum"]
    if got is None or got.split("-")[0] != spec["python_version"] or _older(got, want):
        raise BaseImageError(
            f"{matrix_path}: container_base: the mirror installed {package} {got}, the pin is Python "
            f"{spec['python_version']} packaged {want} or newer (python_version, python_package_minimum)"
        )
    return got


def build_tarball(spec: Mapping[str, Any], tarball: Path, log: Path, matrix_path: Path) -> None:
    mirror, security = mirrors()
    work = Path(tempfile.mkdtemp(prefix="base-", dir=tarball.parent))
    try:
        tree = work / "tree"
        include = f"--include={','.join(spec['packages'])}"
        _run(["debootstrap", "--variant=minbase", include, spec["suite"], str(tree), mirror], log)
        # debootstrap takes the suite alone; the point and security updates come from apt in the tree.
        (tree / "etc/apt/sources.list").write_text(
            f"deb {mirror} {spec['suite']} main\ndeb {mirror} {spec['suite']}-updates main\n"
            f"deb {security} {spec['suite']}-security main\n"
        )
        for step in (["apt-get", "update", "-qq"], ["apt-get", "upgrade", "-y", "-qq"], ["apt-get", "clean"]):
            _run(["chroot", str(tree), *step], log, env={"DEBIAN_FRONTEND": "noninteractive", "PATH": CHROOT_PATH})
        python = check_python(tree, spec, matrix_path)
        with log.open("a") as out:
            out.write(f"base: {spec['suite']} with python{spec['python_version']} package {python}\n")
        for relative in PRUNED:
            shutil.rmtree(tree / relative, ignore_errors=True)
        (tree / "var/cache/apt/archives/partial").mkdir(parents=True)
        (tree / "var/lib/apt/lists/partial").mkdir(parents=True)
        (tree / "var/log").mkdir()
        (tree / "etc/machine-id").write_text("")
        partial = work / "rootfs.tar"
        _run(["tar", "--numeric-owner", "--xattrs", "-C", str(tree), "-cf", str(partial), "."], log)
        partial.rename(tarball)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ensure_base(spec: Mapping[str, Any], cache_dir: Path, matrix_path: Path) -> tuple[str, float | None]:
    """The base image's tag, built and imported first if missing. Returns (tag, seconds spent or None)."""
    tag = base_tag(spec)
    if podman_ok("image", "exists", tag):
        return tag, None
    started = time.monotonic()
    cache = cache_dir / "images"
    cache.mkdir(parents=True, exist_ok=True)
    tarball = cache / f"container-base-{base_key(spec)}.tar"
    with (cache_dir / ".container-base.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not tarball.is_file():
            if shutil.which("debootstrap") is None:
                raise BaseImageError("debootstrap is not installed; run `make deps`")
            log = cache / f"container-base-{base_key(spec)}.log"
            log.write_text("")
            print(f"images: debootstrap of the base ({spec['suite']}, about a minute; log {log})", file=sys.stderr)
            build_tarball(spec, tarball, log, matrix_path)
        if not podman_ok("image", "exists", tag):
            podman("import", "--message", json.dumps(base_inputs(spec), sort_keys=True), str(tarball), tag)
    return tag, time.monotonic() - started
