"""Build an app image: assemble a small build context, then `podman build` on the base image.

The context holds the Containerfile, requirements.txt (the app's packages at the repository's
exact pins), serving/ and the model repository's configs, labels and drift references (not the
model files: Triton serves those). RUN steps use chroot isolation: no OCI runtime, the host's
network, and the build machine's CA bundle bound read-only for pip.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from serving.images.apps import REPO, App, requirement_lines
from serving.images.podman import podman, podman_ok

CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc")


@dataclass(frozen=True)
class Built:
    tag: str
    revision: str
    seconds: float
    existed: bool  # the tag was there before this build (now replaced)


def revision() -> str:
    """The commit the image is built from, with `-dirty` when the work tree differs from it."""
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--", "serving", "model_repository"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return head.stdout.strip() + ("-dirty" if dirty else "")


def _model_files(directory: str, names: list[str]) -> list[str]:
    """Leave out the numbered version folders (model files) of each model."""
    return [name for name in names if name.isdigit() and Path(directory, name).is_dir()] + list(_SKIP(directory, names))


def assemble(app: App, context: Path) -> None:
    shutil.copy2(app.containerfile, context / "Containerfile")
    (context / "requirements.txt").write_text("\n".join(requirement_lines(app)) + "\n")
    # The serving package without its image recipes (this folder): an image needs no builder.
    shutil.copytree(
        REPO / "serving", context / "serving", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "images")
    )
    shutil.copytree(REPO / "model_repository", context / "model_repository", ignore=_model_files)


def build(app: App, base: str) -> Built:
    started = time.monotonic()
    rev = revision()
    tag = f"{app.repository}:{rev[:12]}{'-dirty' if rev.endswith('-dirty') else ''}"
    existed = podman_ok("image", "exists", tag)
    with tempfile.TemporaryDirectory(prefix=f"image-{app.name}-") as tmp:
        context = Path(tmp)
        assemble(app, context)
        podman(
            "build",
            "--isolation=chroot",
            "--layers=false",
            f"--volume={CA_BUNDLE}:/run/build-ca.crt:ro",
            f"--build-arg=BASE_IMAGE={base}",
            f"--label=org.opencontainers.image.revision={rev}",
            f"--label=org.opencontainers.image.title=gpu-serving-{app.name}",
            f"--label=org.opencontainers.image.base.name={base}",
            f"--tag={tag}",
            "--file=Containerfile",
            str(context),
        )
    return Built(tag=tag, revision=rev, seconds=time.monotonic() - started, existed=existed)
