"""The cache of built environments, outside the clone.

Each environment lives in `${XDG_CACHE_HOME:-~/.cache}/gpu-serving-envs/<name>-<key>`, the key
a hash of everything that decides its content (its locks, the interpreter, the recipe). A build
runs under a file lock, in `<name>-<key>.tree` (where it stays: a venv's scripts name their
interpreter by absolute path), and is published by renaming a symlink onto `<name>-<key>`, so an
interrupted build never leaves a half environment under the final name.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the XDG spec: a relative value is ignored
        base = os.path.expanduser("~/.cache")
    return Path(base) / "gpu-serving-envs"


def key(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()[:16]


def publish(path: Path, build: Callable[[Path], None]) -> bool:
    """Make `path` exist, built by `build(tree)` unless it already does; True when it built."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another make building the same environment waits here
        if path.exists():
            return False
        tree = path.with_name(path.name + ".tree")
        if tree.exists():  # left by an interrupted build
            shutil.rmtree(tree)
        build(tree)
        staged = path.with_name(path.name + ".publish")
        staged.unlink(missing_ok=True)
        staged.symlink_to(tree.name)
        os.replace(staged, path)
    return True


def link(at: Path, target: Path) -> bool:
    """Point the clone's `at` to `target`; True when the link changed. A directory there (an
    environment built inside the clone) is replaced."""
    if at.is_symlink() and os.readlink(at) == str(target):
        return False
    if at.is_dir() and not at.is_symlink():
        shutil.rmtree(at)
    at.parent.mkdir(parents=True, exist_ok=True)
    staged = at.with_name(at.name + ".link")
    staged.unlink(missing_ok=True)
    staged.symlink_to(target)
    os.replace(staged, at)
    return True
