"""Building the environments into the cache and linking them into the clone.

Every build refuses a stale lock first. Python environments: `python -m venv` (pip included,
from the interpreter's own wheel), then `uv pip install --require-hashes` of each lock. uv comes
from a venv of its own, installed by pip with --require-hashes from requirements-uv.lock. The npm
tree: `npm ci` (which checks package-lock.json's integrity hashes) beside the folder's files.
"""

from __future__ import annotations

import contextlib
import io
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from locked_envs import cache
from locked_envs.catalog import UV_LOCK, NpmTree, PythonEnv
from locked_envs.lockfile import TARGET_PYTHON, Lock, LockError, stale_inputs

# Part of every key: a change of how an environment is built builds it anew.
PYTHON_RECIPE = b"python -m venv; uv pip install --require-hashes -r LOCK [--no-deps]; .stamp"
UV_RECIPE = b"python -m venv; pip install --require-hashes --no-deps --only-binary :all: -r LOCK"
NPM_RECIPE = b"cp FILES; npm ci --ignore-scripts; .stamp"
# The last file of a build, as the make targets (`make .venv-triton/.stamp`) name it; readers such
# as model_repo_check/tritonserver take it for a whole environment.
STAMP = ".stamp"
PROBE = "import sys; print('%d.%d' % sys.version_info[:2]); print(sys.version); print(sys.base_prefix)"


def check(root: Path, locks: list[Lock]) -> None:
    """Raise LockError naming every input changed since its lock was compiled. The locks are read
    side by side: a generated input waits on its own Python."""
    with ThreadPoolExecutor() as pool:
        stale = list(pool.map(lambda lock: stale_inputs(root, lock), locks))
    problems = [line for lines in stale for line in lines]
    if problems:
        raise LockError("\n".join(problems))


def interpreter(python: str) -> bytes:
    """What of the interpreter decides an environment: its version and installation. It must be
    the Python the locks are compiled for."""
    if python == sys.executable:  # the same probe, without starting the interpreter again
        with contextlib.redirect_stdout(io.StringIO()) as out:
            exec(PROBE)
        found = out.getvalue()
    else:
        try:
            found = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError) as error:
            raise LockError(f"cannot run the Python {python}: {error}") from error
    version = found.splitlines()[0]
    if version != TARGET_PYTHON:
        raise LockError(f"{python} is Python {version}; the locks are compiled for Python {TARGET_PYTHON}")
    return found.encode()


def uv_binary(root: Path, checked: bool = True) -> Path:
    """uv from its cached venv (built on first use). `make lock` passes checked=False: it takes
    the uv of the current lock to compile a new one."""
    if checked:
        check(root, [UV_LOCK])
    python = sys.executable
    lock = root / UV_LOCK.path
    path = cache.cache_dir() / f"uv-{cache.key(UV_RECIPE, interpreter(python), lock.read_bytes())}"

    def build(tree: Path) -> None:
        run([python, "-m", "venv", str(tree)])
        pip = [str(tree / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check"]
        run([*pip, "--require-hashes", "--no-deps", "--only-binary", ":all:", "-r", str(lock)])

    _timed(f"uv ({UV_LOCK.path})", path, build)
    return path / "bin" / "uv"


def python_env(root: Path, env: PythonEnv, python: str) -> Path:
    """The environment `env` for this interpreter, built if missing, and linked at env.link."""
    check(root, [UV_LOCK, *env.locks])
    locks = [root / lock.path for lock in env.locks]
    parts = [PYTHON_RECIPE, interpreter(python), *(lock.read_bytes() for lock in locks)]
    path = cache.cache_dir() / f"{Path(env.link).name.lstrip('.')}-{cache.key(*parts)}"

    def build(tree: Path) -> None:
        uv = uv_binary(root, checked=False)  # checked above
        run([python, "-m", "venv", str(tree)])
        for lock in env.locks:
            install = [str(uv), "pip", "install", "--quiet", "--python", str(tree / "bin" / "python")]
            install += ["--require-hashes", "-r", str(root / lock.path)]
            run([*install, "--no-deps"] if lock.no_deps else install)
        (tree / STAMP).touch()

    _timed(f"{env.link} ({', '.join(lock.path for lock in env.locks)})", path, build)
    _link(root, env.link, path)
    return path


def npm_tree(root: Path, tree: NpmTree) -> Path:
    """The npm tree `tree`, built if missing, and linked at tree.link."""
    try:
        node = subprocess.run(["node", "--version"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        raise LockError(f"{tree.link} needs node and npm: {error}") from error
    files = [root / tree.folder / name for name in tree.files]
    path = cache.cache_dir() / f"{Path(tree.link).name}-{cache.key(NPM_RECIPE, node, *(f.read_bytes() for f in files))}"

    def build(folder: Path) -> None:
        folder.mkdir(parents=True)
        for file in files:
            shutil.copy2(file, folder / file.name)
        npm = ["npm", "ci", "--prefix", str(folder), "--ignore-scripts", "--no-audit", "--no-fund"]
        run([*npm, "--loglevel=error"])
        (folder / STAMP).touch()

    _timed(f"{tree.link} ({tree.folder}/package-lock.json)", path, build)
    _link(root, tree.link, path)
    return path


def _timed(what: str, path: Path, build: Callable[[Path], None]) -> None:
    started = time.monotonic()

    def announced(tree: Path) -> None:
        print(f"locked_envs: building {what} in {path}", flush=True)
        build(tree)

    if cache.publish(path, announced):
        print(f"locked_envs: built {path.name} in {time.monotonic() - started:.0f} s", flush=True)


def _link(root: Path, at: str, path: Path) -> None:
    if cache.link(root / at, path):
        print(f"locked_envs: {at} -> {path}", flush=True)


def run(argv: list[str], cwd: Path | None = None, stdin: str | None = None) -> None:
    """Run a build step, its output shown; a failure raises LockError naming the command."""
    returncode = subprocess.run(argv, cwd=cwd, input=stdin, text=True, check=False).returncode
    if returncode != 0:
        raise LockError(f"`{shlex.join(argv)}` failed (exit {returncode})")
