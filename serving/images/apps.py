"""The images: which module each runs, its port, its user, the packages it needs and the sources it is built from.

Versions are not written here: each package is installed at the exact pin (==) that the
requirements files give it (the repository's for the serving apps, limiter/requirements.txt for the
limiter agent), so the image runs what the tests ran.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = (REPO / "requirements.txt", REPO / "requirements-dev.txt")
LIMITER_REQUIREMENTS = (REPO / "limiter/requirements.txt",)
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?P<extras>\[[^\]]*\])?==(?P<version>\S+)")


class RequirementError(ValueError):
    pass


@dataclass(frozen=True)
class App:
    name: str
    module: str
    port: int
    packages: tuple[str, ...]  # empty: every exact pin of `requirements`
    user: str = "10001:10001"
    # Repository paths copied into the build context (by their last name) and checked for a dirty tree.
    sources: tuple[str, ...] = ("serving", "model_repository")
    requirements: tuple[Path, ...] = REQUIREMENTS
    recipe: str = ""  # the Containerfile's repository path; default serving/images/<name>/Containerfile

    @property
    def containerfile(self) -> Path:
        return REPO / self.recipe if self.recipe else Path(__file__).with_name(self.name) / "Containerfile"

    @property
    def repository(self) -> str:
        return f"localhost/gpu-serving/{self.name}"


APPS: dict[str, App] = {
    "gateway": App(
        name="gateway",
        module="serving.gateway",
        port=8000,
        packages=("fastapi", "uvicorn", "uvloop", "httptools", "tritonclient", "PyYAML", "prometheus-client"),
    ),
    "drift": App(
        name="drift",
        module="serving.drift",
        port=8080,
        packages=("evidently", "pandas", "prometheus-client"),
    ),
    # The cgroup limiter node agent (a DaemonSet): uid 0 without capabilities, to write the
    # root-owned cgroup files (see limiter/README.md); its own requirements file is its whole set.
    "limiter": App(
        name="limiter",
        module="cgroup_limiter",
        port=9500,
        packages=(),
        user="0",
        sources=("limiter/cgroup_limiter",),
        requirements=LIMITER_REQUIREMENTS,
        recipe="limiter/Containerfile",
    ),
}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(files: tuple[Path, ...] = REQUIREMENTS) -> dict[str, tuple[str, str]]:
    """Every exact pin in the requirements files: canonical name -> (requirement line, where)."""
    found: dict[str, tuple[str, str]] = {}
    for path in files:
        for number, raw in enumerate(path.read_text().splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if match := _PIN.match(line):
                found.setdefault(_canonical(match["name"]), (line, f"{path.name}:{number}"))
    return found


def _every_pin(app: App, files: tuple[Path, ...]) -> list[str]:
    """Every requirement of the files, each of which must be an exact pin."""
    lines = []
    for path in files:
        for number, raw in enumerate(path.read_text().splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if line and not _PIN.match(line):
                raise RequirementError(
                    f"{path}:{number}: {app.name} takes every requirement of this file; {line!r} is not pinned with =="
                )
            if line:
                lines.append(line)
    return lines


def requirement_lines(app: App, files: tuple[Path, ...] | None = None) -> list[str]:
    """The app's pip requirement lines, each exactly as pinned in the requirements files (default: the app's)."""
    files = files or app.requirements
    if not app.packages:
        return _every_pin(app, files)
    known = pins(files)
    missing = [name for name in app.packages if _canonical(name) not in known]
    if missing:
        where = ", ".join(path.name for path in files)
        raise RequirementError(
            f"serving/images/apps.py: {app.name} needs {', '.join(missing)}, but {where} pin none exactly"
        )
    return [known[_canonical(name)][0] for name in app.packages]
