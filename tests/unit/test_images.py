"""serving/images/ without podman: the pins each image installs come from the requirements files, and the
base tree's Python is checked against the matrix. What the built images run (module, port, user) is proven
on the images themselves: tests/serving_lab/test_images.py (gateway, drift) and tests/lab/test_limiter_image.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from platform_matrix import load
from serving.images.apps import APPS, App, RequirementError, pins, requirement_lines
from serving.images.base import BaseImageError, check_python, installed_version

SPEC = load().data["container_base"]


@pytest.mark.parametrize("name", sorted(APPS))
def test_every_package_of_an_image_is_pinned_exactly_in_the_requirements(name: str) -> None:
    lines = requirement_lines(APPS[name])
    assert len(lines) == (len(APPS[name].packages) or len(pins(APPS[name].requirements)))
    assert lines and all("==" in line for line in lines)


def test_an_app_without_a_package_list_takes_every_line_and_each_must_be_pinned(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# agent\nPyYAML==6.0.4\nkubernetes==37.0.2  # API watch\n")
    app = App(name="agent", module="agent", port=1, packages=(), requirements=(requirements,))
    assert requirement_lines(app) == ["PyYAML==6.0.4", "kubernetes==37.0.2"]
    requirements.write_text("PyYAML==6.0.4\nkubernetes>=37\n")
    with pytest.raises(RequirementError, match=rf"^{re.escape(str(requirements))}:2: agent takes every requirement"):
        requirement_lines(app)


def test_a_package_without_an_exact_pin_is_named(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("fastapi==0.165.0  # pinned\nuvicorn>=0.30\n")
    app = App(name="x", module="serving.x", port=1, packages=("fastapi", "uvicorn"))
    assert requirement_lines(App("x", "serving.x", 1, ("fastapi",)), (requirements,)) == ["fastapi==0.165.0"]
    with pytest.raises(RequirementError, match=r"x needs uvicorn, but requirements.txt pin none exactly"):
        requirement_lines(app, (requirements,))


def _tree(tmp_path: Path, version: str) -> Path:
    status = tmp_path / "var/lib/dpkg/status"
    status.parent.mkdir(parents=True)
    status.write_text(
        "Package: libc6\nStatus: install ok installed\nVersion: 2.36-9\n\n"
        f"Package: python3.11\nStatus: install ok installed\nVersion: {version}\nDescription: x\n two\n"
    )
    return tmp_path


def test_the_trees_python_must_be_the_pinned_package(tmp_path: Path) -> None:
    tree = _tree(tmp_path, SPEC["python_package_minimum"])
    assert installed_version(tree, "python3.11") == SPEC["python_package_minimum"]
    assert installed_version(tree, "python3.12") is None
    assert check_python(tree, SPEC, Path("matrix.yml")) == SPEC["python_package_minimum"]


def test_a_newer_debian_revision_of_the_same_python_is_taken(tmp_path: Path) -> None:
    tree = _tree(tmp_path, SPEC["python_package_minimum"] + "1")  # e.g. +deb12u9 -> +deb12u91
    assert check_python(tree, SPEC, Path("matrix.yml")) == SPEC["python_package_minimum"] + "1"


@pytest.mark.parametrize("version", ["3.11.2-6+deb12u1", "3.11.4-1", "3.12.1-2"])
def test_an_older_package_or_another_python_names_the_matrix_pin(tmp_path: Path, version: str) -> None:
    tree = _tree(tmp_path, version)
    with pytest.raises(
        BaseImageError, match=rf"^matrix.yml: container_base: .*{re.escape(version)}.*python_package_minimum"
    ):
        check_python(tree, SPEC, Path("matrix.yml"))
