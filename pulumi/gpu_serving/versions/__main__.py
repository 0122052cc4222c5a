"""`python -m gpu_serving.versions [--out docs/versions.md]` (`make docs`): print the versions page,
or write it to a file; exit 1 naming the file and the reason when an input cannot be read."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import platform_matrix
from gpu_serving.config import ConfigError, from_stack_file
from gpu_serving.versions.environments import ROOT, environment, stack_environments
from gpu_serving.versions.labs import VersionsError, labs
from gpu_serving.versions.page import page


def generate() -> str:
    matrix = platform_matrix.load()
    found = labs(matrix, ROOT)
    return page(found, [environment(from_stack_file(env), matrix, found) for env in stack_environments()])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_serving.versions")
    parser.add_argument("--out", type=Path, help="write the page here instead of printing it")
    args = parser.parse_args(argv)
    try:
        text = generate()
    except (ConfigError, VersionsError, platform_matrix.MatrixError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
