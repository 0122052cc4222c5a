"""The serving layer's images: which module each runs, its port, and the packages it needs.

Versions are not written here: each package is installed at the exact pin (==) that the
repository's requirements files give it, so the image runs what the tests ran.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = (REPO / "requirements.txt", REPO / "requirements-dev.txt")
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?P<extras>\[[^\]]*\])?==(?P<version>\S+)")


class RequirementError(ValueError):
    pass


@dataclass(frozen=True)
class App:
    name: str
    module: str
    port: int
    packages: tuple[str, ...]

    @property
    def containerfile(self) -> Path:
        return Path(__file__).with_name(self.name) / "Containerfile"

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


def requirement_lines(app: App, files: tuple[Path, ...] = REQUIREMENTS) -> list[str]:
    """The app's pip requirement lines, each exactly as pinned in the requirements files."""
    known = pins(files)
    missing = [name for name in app.packages if _canonical(name) not in known]
    if missing:
        where = ", ".join(path.name for path in files)
        raise RequirementError(
            f"serving/images/apps.py: {app.name} needs {', '.join(missing)}, but {where} pin none exactly"
        )
    return [known[_canonical(name)][0] for name in app.packages]
