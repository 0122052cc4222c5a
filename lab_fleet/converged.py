"""A converged lab node's disk, cached by the content of everything that shapes a node.

The fresh-node proofs (check mode, the refused first install, the converge with its reboot, a
no-op re-run) run on a node booted from the base image; when they pass, the node is powered down
cleanly and its copy-on-write disk (the changes over the base image, nothing else) is kept under
the cache directory as `converged/<key>/disk.qcow2`. Later sessions boot overlays of it instead of
converging again. The key hashes every file under `NODE_INPUTS` (roles, playbooks, filter plugins,
the lab inventory's variables, the platform matrix and its code, ansible.cfg; of the add-ons'
role and playbook, which render manifests on the controller, only the role's argument specs),
the pins of the
packages that run the playbooks (`NODE_PINS` in requirements.txt) and the base image's key, so any
change to what a node gets produces a new image, and the proofs that produce it run again.
"""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from lab_fleet.image import image_key

REPO_ROOT = Path(__file__).resolve().parents[1]
NODE_INPUTS = (
    "ansible.cfg",
    "roles",
    "playbooks",
    "plugins",
    "inventories/lab",
    "platform_matrix",
)
SKIPPED_NAMES = {"__pycache__", "hosts.yml"}  # bytecode, and the inventory `scripts/lab up` writes
# The cluster add-ons are rendered on the controller into deploy/addons, which Argo CD applies:
# no node play runs them (tests/unit/test_converged_image.py). Their argument specs still count:
# preflight's check of the role variables in scope (a filter on the controller, for each node)
# reads every role's specs, so they decide whether a node play passes.
CONTROLLER_ONLY = ("roles/k8s_addons", "playbooks/k8s_addons.yml")
READ_BY_NODE_PLAYS = ("roles/k8s_addons/meta/argument_specs.yml",)
SKIPPED_SUFFIXES = {".md", ".pyc"}  # the docs beside the code reach no node
# What runs the playbooks and the filter plugins; the other pins of requirements.txt never reach a node.
NODE_PINS = ("ansible", "ansible-core", "mitogen", "jsonschema", "pyyaml")


def _controller_only(relative: Path) -> bool:
    if relative in map(Path, READ_BY_NODE_PLAYS):
        return False
    return any(relative == Path(path) or Path(path) in relative.parents for path in CONTROLLER_ONLY)


def _input_files(root: Path) -> Iterator[Path]:
    for name in NODE_INPUTS:
        path = root / name
        if path.is_file():
            yield path
            continue
        for file in sorted(path.rglob("*")):
            relative = file.relative_to(root)
            skipped = file.suffix in SKIPPED_SUFFIXES or SKIPPED_NAMES.intersection(relative.parts)
            if file.is_file() and not skipped and not _controller_only(relative):
                yield file


def node_pins(requirements: Path) -> list[str]:
    """The `name==version` lines of NODE_PINS in a requirements file, comments dropped, sorted."""
    pins = []
    for line in requirements.read_text().splitlines():
        requirement = line.split("#", 1)[0].strip()
        name = re.split(r"[=<>!~\[ ;]", requirement, maxsplit=1)[0].lower()
        if name in NODE_PINS:
            pins.append(requirement)
    return sorted(pins)


def _content(file: Path) -> bytes:
    """What a file means to a node: a YAML file's data (its comments and layout change nothing),
    any other file's bytes. YAML that the safe loader refuses (Ansible's !unsafe, !vault) counts as bytes."""
    raw = file.read_bytes()
    if file.suffix in (".yml", ".yaml"):
        try:
            return json.dumps(list(yaml.safe_load_all(raw)), sort_keys=True, default=str).encode()
        except yaml.YAMLError:
            return raw
    return raw


def node_key(root: Path = REPO_ROOT) -> str:
    """sha256 over the base image key, the node pins and every node input's path and content (16 hex digits)."""
    digest = hashlib.sha256(f"base-image {image_key()}\n".encode())
    digest.update("\n".join(node_pins(root / "requirements.txt")).encode())
    for file in _input_files(root):
        digest.update(f"{file.relative_to(root)}\n".encode())
        digest.update(hashlib.sha256(_content(file)).digest())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class ConvergedImage:
    directory: Path

    @property
    def disk(self) -> Path:
        return self.directory / "disk.qcow2"

    @property
    def manifest(self) -> Path:
        return self.directory / "manifest.json"

    def exists(self) -> bool:
        return self.disk.is_file() and self.manifest.is_file()

    def describe(self) -> str:
        """One line for a skip reason: which image, written when, by which proofs."""
        data = json.loads(self.manifest.read_text())
        return f"converged image {self.directory.name}, written {data['written']} after: {', '.join(data['proofs'])}"


def cached(cache_dir: Path, key: str | None = None) -> ConvergedImage:
    return ConvergedImage(cache_dir / "converged" / (key or node_key()))


@contextmanager
def producing(image: ConvergedImage) -> Iterator[bool]:
    """Hold the image's lock while it is produced; yields False when another process wrote it meanwhile."""
    image.directory.parent.mkdir(parents=True, exist_ok=True)
    with (image.directory.parent / f"{image.directory.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield not image.exists()


def save(image: ConvergedImage, node_disk: Path, proofs: list[str]) -> None:
    """Keep a powered-down node's disk as the converged image: copied, checked, then moved into place."""
    work = Path(tempfile.mkdtemp(prefix="save-", dir=image.directory.parent))
    try:
        subprocess.run(["cp", "--sparse=always", str(node_disk), str(work / "disk.qcow2")], check=True)
        subprocess.run(["qemu-img", "check", "-q", str(work / "disk.qcow2")], check=True)
        written = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        manifest = {"key": image.directory.name, "base_image": image_key(), "written": written, "proofs": proofs}
        (work / "manifest.json").write_text(json.dumps(manifest, indent=2))
        shutil.rmtree(image.directory, ignore_errors=True)
        work.rename(image.directory)
    finally:
        shutil.rmtree(work, ignore_errors=True)
