"""A lock's inputs and the header that records them.

An input is a requirements file (with every file it includes by -r/-c, followed here) or the
text of a command (the serving lab's pins come from platform_matrix). `make lock` writes the
sha256 of each input into the lock's header; `stale_inputs` compares them with the inputs as
they are now, so a requirements change without its lock fails, naming the file.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from locked_envs import cache

TARGET_PYTHON = "3.11"  # Debian 12's Python, the one every environment runs on
TARGET_PLATFORM = "x86_64-manylinux_2_36"  # Debian 12 on x86_64 (glibc 2.36)
HEADER = (
    "# Compiled by `make lock` (locked_envs) for Python {python} on {platform}: do not edit.",
    "# Every distribution is pinned with its hashes; the lines below record the sha256 of each",
    "# input, and a build refuses this lock when an input no longer matches.",
)
_INPUT_LINE = re.compile(r"^# input sha256:([0-9a-f]{64}) (.+)$")
_INCLUDE = re.compile(r"^(?:-r|-c|--requirement|--constraint)(?:\s+|=)(\S+)")


class LockError(Exception):
    """A lock that cannot be used as it is; the message says which file and what to run."""


@dataclass(frozen=True)
class RequirementsSource:
    """A requirements file, compiled as uv reads it (includes followed)."""

    path: str  # relative to the repository root

    def inputs(self, root: Path) -> dict[str, str]:
        """sha256 of the file and of every file it includes, by path relative to root."""
        found: dict[str, str] = {}
        _follow(root, Path(self.path), found)
        return found


@dataclass(frozen=True)
class CommandSource:
    """Requirement lines printed by a module of this repository, run with the Python of the venv
    `venv` (platform_matrix needs PyYAML); `label` names what the lines come from in messages.

    The lines depend only on the files of the folder `reads` and on that venv, so they are kept
    in the cache under a hash of both: an unchanged matrix costs no Python start."""

    label: str
    argv: tuple[str, ...]  # after `python`
    reads: str  # the folder whose files the command reads, relative to the repository root
    venv: str = ".venv"

    def text(self, root: Path) -> str:
        python = f"{self.venv}/bin/python"
        if not (root / python).exists():
            raise LockError(f"{self.label} is read by {python}, which is missing: run `make venv` first")
        files = sorted(path for path in (root / self.reads).rglob("*") if path.is_file() and path.suffix != ".pyc")
        parts = [os.path.realpath(root / self.venv).encode(), *map(str.encode, self.argv)]
        parts += [part for path in files for part in (path.relative_to(root).as_posix().encode(), path.read_bytes())]
        kept = cache.cache_dir() / "inputs" / cache.key(*parts)
        if kept.exists():
            return kept.read_text()
        run = subprocess.run([str(root / python), *self.argv], cwd=root, capture_output=True, text=True, check=False)
        if run.returncode != 0:
            raise LockError(f"`{shlex.join([python, *self.argv])}` failed: {run.stderr.strip()}")
        kept.parent.mkdir(parents=True, exist_ok=True)
        staged = kept.with_name(f"{kept.name}.{os.getpid()}")
        staged.write_text(run.stdout)
        os.replace(staged, kept)
        return run.stdout

    def inputs(self, root: Path) -> dict[str, str]:
        return self.inputs_of(self.text(root))

    def inputs_of(self, text: str) -> dict[str, str]:
        return {self.label: sha256(text.encode())}


Source = RequirementsSource | CommandSource


@dataclass(frozen=True)
class Lock:
    """One hashed lock file; `no_deps` locks are installed without their dependencies."""

    path: str  # relative to the repository root
    source: Source
    no_deps: bool = False


def header(inputs: dict[str, str]) -> str:
    lines = [line.format(python=TARGET_PYTHON, platform=TARGET_PLATFORM) for line in HEADER]
    lines += [f"# input sha256:{digest} {name}" for name, digest in inputs.items()]
    return "\n".join(lines) + "\n"


def recorded_inputs(lock_text: str) -> dict[str, str]:
    """The inputs a lock's header records, by name."""
    recorded: dict[str, str] = {}
    for line in lock_text.splitlines():
        match = _INPUT_LINE.match(line)
        if match:
            recorded[match.group(2)] = match.group(1)
    return recorded


def stale_inputs(root: Path, lock: Lock) -> list[str]:
    """One line per input that changed since the lock was compiled (empty when it is current)."""
    path = root / lock.path
    if not path.exists():
        return [f"{lock.path} is missing: run `make lock`"]
    recorded = recorded_inputs(path.read_text())
    return [
        f"{name} changed since {lock.path} was compiled: run `make lock`"
        for name, digest in lock.source.inputs(root).items()
        if recorded.get(name) != digest
    ]


def _follow(root: Path, relative: Path, found: dict[str, str]) -> None:
    name = relative.as_posix()
    if name in found:
        return
    path = root / relative
    if not path.exists():
        raise LockError(f"{name} is missing (an input of a lock)")
    data = path.read_bytes()
    found[name] = sha256(data)
    for line in data.decode().splitlines():
        match = _INCLUDE.match(line.strip())
        if match:
            # pip and uv resolve an include from the including file's folder
            _follow(root, Path(os.path.normpath(relative.parent / match.group(1))), found)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
