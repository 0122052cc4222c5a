"""Build an app image: assemble a small build context, then `podman build` on the base image.

The context holds the Containerfile, requirements.txt (the app's packages at their exact pins) and
the app's sources: for the serving apps serving/ and the model repository's configs, labels and
drift references (not the model files: Triton serves those), for the limiter cgroup_limiter/.
RUN steps use chroot isolation: no OCI runtime, the host's network, and the build machine's CA
bundle bound read-only for pip. `save` writes a built image as a docker-archive tarball (for
`ctr images import` on a node without a registry).
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


def revision(paths: tuple[str, ...]) -> str:
    """The commit the image is built from, with `-dirty` when the work tree differs from it under `paths`."""
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--", *paths],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return head.stdout.strip() + ("-dirty" if dirty else "")


def _model_files(directory: str, names: list[str]) -> list[str]:
    """Leave out the numbered version folders (model files) of each model."""
    return [name for name in names if name.isdigit() and Path(directory, name).is_dir()] + list(_SKIP(directory, names))


# What each source leaves out: the serving package its image recipes (this folder: an image needs no
# builder), the model repository its model files.
_IGNORE = {
    "serving": shutil.ignore_patterns("__pycache__", "*.pyc", "images"),
    "model_repository": _model_files,
}


def assemble(app: App, context: Path) -> None:
    shutil.copy2(app.containerfile, context / "Containerfile")
    (context / "requirements.txt").write_text("\n".join(requirement_lines(app)) + "\n")
    for source in app.sources:
        shutil.copytree(REPO / source, context / Path(source).name, ignore=_IGNORE.get(source, _SKIP))


def build(app: App, base: str) -> Built:
    started = time.monotonic()
    rev = revision((*app.sources, str(app.containerfile.parent.relative_to(REPO))))
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


def save(tag: str, archive: Path) -> Path:
    """The image as a docker-archive tarball (its tag kept inside), written to `archive` via a partial file."""
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    podman("save", "--format=docker-archive", f"--output={partial}", tag)
    partial.rename(archive)
    return archive
