"""Every locked environment of this repository, by the path it is linked to in the clone."""

from __future__ import annotations

from dataclasses import dataclass

from locked_envs.lockfile import CommandSource, Lock, RequirementsSource


@dataclass(frozen=True)
class PythonEnv:
    """A virtual environment installed from its locks, in order."""

    link: str  # the path in the clone, relative to the repository root
    locks: tuple[Lock, ...]


@dataclass(frozen=True)
class NpmTree:
    """`npm ci` of a package-lock.json, with the folder's files beside node_modules."""

    link: str
    folder: str
    files: tuple[str, ...]


# uv itself, bootstrapped with pip into a venv of its own (uv compiles and installs the others).
UV_LOCK = Lock("requirements-uv.lock", RequirementsSource("requirements-uv.txt"))


def _from_file(link: str, requirements: str, lock: str) -> PythonEnv:
    return PythonEnv(link, (Lock(lock, RequirementsSource(requirements)),))


SERVING_LAB_PINS = ("-m", "platform_matrix", "serving-lab-requirements")
PYTHON_ENVS = {
    env.link: env
    for env in (
        _from_file(".venv", "requirements-dev.txt", "requirements-dev.lock"),  # includes requirements.txt
        _from_file(".venv-checkov", "requirements-checkov.txt", "requirements-checkov.lock"),
        _from_file(".venv-policy", "pulumi/policy/requirements.txt", "pulumi/policy/requirements.lock"),
        _from_file(".venv-s3", "requirements-s3.txt", "requirements-s3.lock"),
        # The serving lab's pins live in platform_matrix/matrix.yml; the Triton wheel goes in
        # without its dependencies (PyTriton's Python side is not used).
        PythonEnv(
            ".venv-triton",
            (
                Lock(
                    "requirements-triton.lock",
                    CommandSource(
                        "platform_matrix/matrix.yml (serving_lab.python_packages)", SERVING_LAB_PINS, "platform_matrix"
                    ),
                ),
                Lock(
                    "requirements-triton-no-deps.lock",
                    CommandSource(
                        "platform_matrix/matrix.yml (serving_lab.triton)",
                        (*SERVING_LAB_PINS, "--no-deps"),
                        "platform_matrix",
                    ),
                    no_deps=True,
                ),
            ),
        ),
    )
}

NPM_TREES = {
    tree.link: tree
    for tree in (
        NpmTree(
            ".cache/argo-rollouts-schema",
            "tests/pulumi/argo-rollouts",
            ("package.json", "package-lock.json", "validate.mjs"),
        ),
    )
}


def all_locks() -> list[Lock]:
    return [UV_LOCK, *(lock for env in PYTHON_ENVS.values() for lock in env.locks)]
