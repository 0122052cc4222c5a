"""`make lock`: every lock compiled anew by `uv pip compile --generate-hashes`, for the target
Python and platform (so a lock does not depend on who compiles it), against the index uv is
given by its environment (UV_INDEX_URL, uv.toml), PyPI by default.

The requirements files come first. The serving lab's pins are printed by platform_matrix, which
runs in the main venv: it is built from its new lock before those are compiled.
"""

from __future__ import annotations

import os
from pathlib import Path

from locked_envs import build
from locked_envs.catalog import PYTHON_ENVS, all_locks
from locked_envs.lockfile import TARGET_PLATFORM, TARGET_PYTHON, CommandSource, Lock, header

UV_COMPILE = ("pip", "compile", "--quiet", "--generate-hashes", "--python-version", TARGET_PYTHON)
UV_COMPILE += ("--python-platform", TARGET_PLATFORM, "--custom-compile-command", "make lock")


def lock_all(root: Path, python: str) -> None:
    uv = build.uv_binary(root, checked=False)
    commands = [lock for lock in all_locks() if isinstance(lock.source, CommandSource)]
    for lock in all_locks():
        if lock not in commands:
            compile_lock(root, lock, uv)
    if commands:
        for venv in sorted({lock.source.venv for lock in commands}):
            build.python_env(root, PYTHON_ENVS[venv], python)
        for lock in commands:
            compile_lock(root, lock, uv)


def compile_lock(root: Path, lock: Lock, uv: Path) -> None:
    """Compile one lock. uv reads the lock it replaces, so unrelated pins stay where they are."""
    argv = [str(uv), *UV_COMPILE, "--output-file", lock.path, *(["--no-deps"] if lock.no_deps else [])]
    if isinstance(lock.source, CommandSource):
        text = lock.source.text(root)
        inputs = lock.source.inputs_of(text)
        build.run([*argv, "-"], cwd=root, stdin=text)
    else:
        inputs = lock.source.inputs(root)
        build.run([*argv, lock.source.path], cwd=root)
    path = root / lock.path
    staged = path.with_name(path.name + ".new")
    staged.write_text(header(inputs) + path.read_text())
    os.replace(staged, path)
    print(f"locked_envs: compiled {lock.path}", flush=True)
