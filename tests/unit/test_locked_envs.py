"""locked_envs: every committed lock is current, a requirements change without its lock fails
naming the file (on copies in a temporary folder, never the real files), and the cache publishes
an environment only once it is whole."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from locked_envs import build, cache
from locked_envs.catalog import PYTHON_ENVS, all_locks
from locked_envs.lockfile import stale_inputs

ROOT = Path(__file__).resolve().parents[2]


def _copy(root: Path, *paths: str) -> None:
    for path in paths:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, root / path)


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text() + line + "\n")


def test_every_lock_is_current():
    build.check(ROOT, all_locks())


def test_each_lock_pins_every_distribution_with_hashes():
    for lock in all_locks():
        pins = [line for line in (ROOT / lock.path).read_text().splitlines() if "==" in line]
        assert pins, lock.path
        assert all(line.endswith(" \\") for line in pins), f"{lock.path}: a pin without hashes"


def test_a_changed_requirements_file_fails_the_build_naming_it(tmp_path):
    _copy(tmp_path, "requirements-uv.txt", "requirements-uv.lock", "requirements-s3.txt", "requirements-s3.lock")
    _append(tmp_path / "requirements-s3.txt", "six==1.17.0")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    run = subprocess.run(
        [sys.executable, "-m", "locked_envs", "ensure", ".venv-s3"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1
    assert run.stderr == "requirements-s3.txt changed since requirements-s3.lock was compiled: run `make lock`\n"
    assert not (tmp_path / "cache").exists(), "nothing is built from a stale lock"
    assert not (tmp_path / ".venv-s3").exists()


def test_an_included_file_is_named_itself(tmp_path):
    _copy(tmp_path, "requirements-dev.txt", "requirements.txt", "pulumi/requirements.txt", "requirements-dev.lock")
    (lock,) = PYTHON_ENVS[".venv"].locks
    assert stale_inputs(tmp_path, lock) == []
    _append(tmp_path / "pulumi/requirements.txt", "six==1.17.0")
    assert stale_inputs(tmp_path, lock) == [
        "pulumi/requirements.txt changed since requirements-dev.lock was compiled: run `make lock`"
    ]


def test_a_new_include_is_named(tmp_path):
    _copy(tmp_path, "requirements-checkov.txt", "requirements-checkov.lock")
    (tmp_path / "extra.txt").write_text("six==1.17.0\n")
    _append(tmp_path / "requirements-checkov.txt", "-r extra.txt")
    (lock,) = PYTHON_ENVS[".venv-checkov"].locks
    assert stale_inputs(tmp_path, lock) == [
        f"{name} changed since requirements-checkov.lock was compiled: run `make lock`"
        for name in ("requirements-checkov.txt", "extra.txt")
    ]


def test_a_missing_lock_is_named(tmp_path):
    _copy(tmp_path, "requirements-s3.txt")
    (lock,) = PYTHON_ENVS[".venv-s3"].locks
    assert stale_inputs(tmp_path, lock) == ["requirements-s3.lock is missing: run `make lock`"]


def test_a_serving_lab_pin_changed_in_the_matrix_is_named(tmp_path, monkeypatch):
    """The Triton venv's locks record the pins platform_matrix prints (run by the main venv)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    shutil.copytree(ROOT / "platform_matrix", tmp_path / "platform_matrix", ignore=shutil.ignore_patterns("*.pyc"))
    _copy(tmp_path, "requirements-triton.lock", "requirements-triton-no-deps.lock")
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    locks = PYTHON_ENVS[".venv-triton"].locks
    matrix = tmp_path / "platform_matrix/matrix.yml"
    assert 'numpy: "1.26.4"' in matrix.read_text()
    assert [line for lock in locks for line in stale_inputs(tmp_path, lock)] == []
    matrix.write_text(matrix.read_text().replace('numpy: "1.26.4"', 'numpy: "1.26.3"'))
    stale = [
        "platform_matrix/matrix.yml (serving_lab.python_packages) changed since requirements-triton.lock "
        "was compiled: run `make lock`"
    ]
    assert [line for lock in locks for line in stale_inputs(tmp_path, lock)] == stale
    assert len(list((tmp_path / "cache/gpu-serving-envs/inputs").iterdir())) == 4, "each reading kept"
    assert [line for lock in locks for line in stale_inputs(tmp_path, lock)] == stale, "and read back"


def test_an_interrupted_build_leaves_no_environment(tmp_path):
    path = tmp_path / "venv-0123"

    def interrupted(tree: Path) -> None:
        (tree / "bin").mkdir(parents=True)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cache.publish(path, interrupted)
    assert not path.exists() and not path.is_symlink()

    def whole(tree: Path) -> None:
        assert not tree.exists(), "the half tree is removed first"
        (tree / "bin").mkdir(parents=True)
        (tree / "bin" / "python").write_text("")

    assert cache.publish(path, whole)
    assert (path / "bin" / "python").exists()
    assert not cache.publish(path, interrupted), "a published environment is not built again"


def test_two_builds_of_one_environment_build_it_once(tmp_path):
    path = tmp_path / "venv-0123"
    started = threading.Barrier(2)
    builds: list[Path] = []

    def slow(tree: Path) -> None:
        builds.append(tree)
        time.sleep(0.5)  # the other thread reaches the lock meanwhile
        tree.mkdir()

    def publish() -> None:
        started.wait()
        cache.publish(path, slow)

    threads = [threading.Thread(target=publish) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1 and path.is_dir()


def test_the_clone_links_to_the_cache_replacing_an_environment_built_in_it(tmp_path):
    target = tmp_path / "cache" / "venv-0123"
    target.mkdir(parents=True)
    at = tmp_path / "clone" / ".venv"
    (at / "bin").mkdir(parents=True)
    assert cache.link(at, target)
    assert at.is_symlink() and at.resolve() == target
    assert not cache.link(at, target), "an unchanged link is left alone"
