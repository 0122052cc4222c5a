"""`python -m platform_matrix check [--triton 24.05 --driver 580.105.08 ...]`: exit 1 on a problem.

`python -m platform_matrix serving-lab-requirements [--no-deps]`: the pip lines of the serving
lab's venv (mk/serving.mk), one per line.
"""

from __future__ import annotations

import argparse
import sys
from datetime import date

from platform_matrix import MatrixError, check, load, pinned_stack


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m platform_matrix")
    parser.add_argument("command", choices=["check", "serving-lab-requirements"])
    parser.add_argument("--file", default=None, help="matrix file (default: the repository's)")
    parser.add_argument("--triton", dest="triton_release")
    parser.add_argument("--driver", dest="driver_version")
    parser.add_argument("--gpu-product")
    parser.add_argument("--kernel-module", choices=["open", "proprietary"])
    parser.add_argument("--toolkit", dest="container_toolkit")
    parser.add_argument("--kubernetes", dest="kubernetes_version")
    parser.add_argument("--mig-strategy")
    parser.add_argument("--cuda-forward-compat", action="store_true", default=None)
    parser.add_argument("--gpu-count", type=int, default=None)
    parser.add_argument("--os-family", help="Debian, Ubuntu or RedHat: picks the driver source and its driver")
    parser.add_argument("--os-version", help="12, 22.04, 24.04, 9")
    parser.add_argument("--kernel", dest="kernel_release", help="a kernel release (uname -r): its headers package")
    parser.add_argument("--date", dest="today", type=date.fromisoformat, help="judge the driver lifecycle on this day")
    parser.add_argument("--no-deps", action="store_true", help="serving-lab-requirements: the wheel pip installs alone")
    args = vars(parser.parse_args(argv))
    path = args.pop("file")
    command = args.pop("command")
    no_deps = args.pop("no_deps")
    try:
        matrix = load(path) if path else load()
    except MatrixError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if command == "serving-lab-requirements":
        print("\n".join(matrix.serving_lab_requirements(no_deps=no_deps)))
        return 0
    stack = pinned_stack(matrix, **args)
    problems = check(matrix, stack)
    for problem in problems:
        print(f"incompatible: {problem}", file=sys.stderr)
    if not problems:
        print(f"compatible: {stack}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
