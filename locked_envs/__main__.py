"""python3 -m locked_envs check | lock | ensure LINK [--python PYTHON]

    check         every lock current (each input's sha256 as its header records); exit 1 names
                  each requirements file changed since its lock was compiled
    lock          compile every lock anew (`make lock`; needs the package index)
    ensure LINK   the environment linked at LINK (.venv, .venv-triton, .cache/argo-rollouts-schema,
                  ...): its lock checked, built into the cache if missing, LINK pointed to it;
                  --python: the interpreter of a Python environment (default: this one)

Run from the repository root (the Makefile's targets do).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from locked_envs import build
from locked_envs.catalog import NPM_TREES, PYTHON_ENVS, all_locks
from locked_envs.compile import lock_all
from locked_envs.lockfile import LockError

ROOT = Path.cwd()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m locked_envs", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["check", "lock", "ensure"])
    parser.add_argument("link", nargs="?", choices=[*PYTHON_ENVS, *NPM_TREES], help="ensure: which environment")
    parser.add_argument("--python", default=sys.executable, help="ensure: the interpreter of a Python environment")
    args = parser.parse_args(argv)
    if args.command == "ensure" and not args.link:
        parser.error("ensure needs the environment's LINK")
    try:
        if args.command == "check":
            build.check(ROOT, all_locks())
        elif args.command == "lock":
            lock_all(ROOT, args.python)
        elif args.link in NPM_TREES:
            build.npm_tree(ROOT, NPM_TREES[args.link])
        else:
            build.python_env(ROOT, PYTHON_ENVS[args.link], args.python)
    except LockError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
