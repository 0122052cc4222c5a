"""python -m serving.images {base,gateway,drift,limiter} [--save FILE]: build an image (the base first, from
the cache if it is there) and print its tag; times go to stderr. --save also writes the image as a
docker-archive tarball (for `ctr images import` on a node that reaches no registry)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from platform_matrix import MatrixError, load
from serving.images.apps import APPS, RequirementError
from serving.images.base import BaseImageError, ensure_base
from serving.images.build import build, save
from serving.images.podman import PodmanError


def cache_dir() -> Path:
    """The lab's cache (lab_fleet), which also keeps the base tarball."""
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpu-serving-lab"
    return Path(os.environ.get("LAB_CACHE_DIR") or default)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m serving.images", description=__doc__)
    parser.add_argument("image", choices=["base", *APPS])
    parser.add_argument("--save", type=Path, metavar="FILE", help="also write the image as a docker-archive tarball")
    args = parser.parse_args(argv)
    try:
        matrix = load()
        base, seconds = ensure_base(matrix.data["container_base"], cache_dir(), matrix.path)
        print(f"images: base {base} ({'cached' if seconds is None else f'{seconds:.0f} s'})", file=sys.stderr)
        tag = base
        if args.image != "base":
            built = build(APPS[args.image], base)
            tag = built.tag
            print(f"images: {tag} built in {built.seconds:.0f} s", file=sys.stderr)
        if args.save:
            print(f"images: {tag} saved to {save(tag, args.save)}", file=sys.stderr)
    except (MatrixError, BaseImageError, PodmanError, RequirementError) as err:
        print(f"images: {err}", file=sys.stderr)
        return 1
    print(tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())
