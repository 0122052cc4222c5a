"""Load matrix.yml, check its shape and its cross-references, and answer questions about it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from platform_matrix.schema import MATRIX_SCHEMA

DEFAULT_PATH = Path(__file__).with_name("matrix.yml")


class MatrixError(ValueError):
    """A malformed matrix file: names the file, the key (a dotted path) and the reason."""

    def __init__(self, path: Path | str, key: str, reason: str) -> None:
        self.path = str(path)
        self.key = key
        self.reason = reason
        super().__init__(f"{self.path}: {key or '<top level>'}: {reason}")


def version_tuple(version: str) -> tuple[int, ...]:
    """'535.216.03' -> (535, 216, 3); a Debian revision or suffix after '-' is ignored."""
    return tuple(int(part) for part in version.split("-", 1)[0].split("."))


def driver_branch(version: str) -> int:
    return version_tuple(version)[0]


def k8s_minor(version: str) -> str:
    major, minor = version_tuple(version)[:2]
    return f"{major}.{minor}"


@dataclass(frozen=True)
class Matrix:
    """The parsed, validated matrix. `data` is the plain mapping Ansible also sees."""

    path: Path
    data: Mapping[str, Any]

    @property
    def driver_version(self) -> str:
        return self.data["nvidia_driver"]["version"]

    @property
    def kubernetes_version(self) -> str:
        return self.data["kubernetes"]["version"]

    def triton_release(self, release: str) -> Mapping[str, Any]:
        try:
            return self.data["triton"]["releases"][release]
        except KeyError:
            known = ", ".join(sorted(self.data["triton"]["releases"]))
            raise KeyError(f"Triton release {release!r} is not in the matrix (known: {known})") from None

    def triton_image(self, release: str | None = None) -> str:
        release = release or self.data["triton"]["default_release"]
        entry = self.triton_release(release)
        triton = self.data["triton"]
        ref = f"{triton['image']}:{release}{triton['image_suffix']}"
        return f"{ref}@{entry['digest']}" if entry["digest"] else ref

    def image(self, name: str) -> str:
        """An add-on image reference, `repo:tag@digest` once a digest is recorded."""
        entry = self.data["images"][name]
        ref = f"{entry['repository']}:{entry['tag']}"
        return f"{ref}@{entry['digest']}" if entry["digest"] else ref

    def chart(self, name: str) -> Mapping[str, Any]:
        return self.data["charts"][name]

    def gpu_product(self, product: str) -> Mapping[str, Any]:
        try:
            return self.data["gpu_products"][product]
        except KeyError:
            known = ", ".join(sorted(self.data["gpu_products"]))
            raise KeyError(f"GPU product {product!r} is not in the matrix (known: {known})") from None

    def driver_source(self, name: str) -> Mapping[str, Any]:
        return self.data["nvidia_driver"]["sources"][name]

    def source_driver_version(self, name: str) -> str:
        """The driver a source installs: its own `version` where it cannot package the fleet pin."""
        return self.driver_source(name).get("version", self.driver_version)

    def os_driver_source(self, family: str) -> str | None:
        """The driver source of an OS family, None for an unsupported family."""
        entry = self.data["operating_systems"].get(family)
        return entry["driver_source"] if entry else None

    @property
    def serving_lab(self) -> Mapping[str, Any]:
        return self.data["serving_lab"]

    def serving_lab_requirements(self, no_deps: bool = False) -> list[str]:
        """pip requirement lines for the serving lab's venv: the packages installed with their
        dependencies, or (no_deps) the Triton wheel, which is installed without them."""
        lab = self.serving_lab
        if no_deps:
            return [f"{lab['triton']['wheel']}=={lab['triton']['wheel_version']}"]
        return [f"{name}=={version}" for name, version in lab["python_packages"].items()]


def _key(path: Iterator[Any] | Any) -> str:
    return ".".join(str(part) for part in path)


def _cross_references(data: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Yield (key, reason) for every reference that points at nothing or a bad value."""
    triton = data["triton"]
    if triton["default_release"] not in triton["releases"]:
        yield "triton.default_release", f"{triton['default_release']!r} is not one of triton.releases"
    previous: tuple[str, int] | None = None
    for release in sorted(triton["releases"], key=version_tuple):
        entry = triton["releases"][release]
        branch = entry["min_driver_branch"]
        if previous and branch < previous[1]:
            yield (
                f"triton.releases.{release}.min_driver_branch",
                f"R{branch} is older than R{previous[1]} required by the earlier release {previous[0]}",
            )
        previous = (release, branch)
        for index, compat in enumerate(entry["forward_compat"]):
            if driver_branch(compat) > branch:
                yield (
                    f"triton.releases.{release}.forward_compat.{index}",
                    f"{compat} is not older than the native branch R{branch}, so it is no forward-compat entry",
                )
    sources = data["nvidia_driver"]["sources"]
    for family, entry in data["operating_systems"].items():
        if entry["driver_source"] not in sources:
            yield (
                f"operating_systems.{family}.driver_source",
                f"{entry['driver_source']!r} is not one of nvidia_driver.sources",
            )
    yield from _driver_references(data)
    yield from _hardware_references(data)
    toolkit = data["container_toolkit"]
    if version_tuple(toolkit["version"]) < version_tuple(toolkit["min_version"]):
        yield "container_toolkit.version", f"{toolkit['version']} is below min_version {toolkit['min_version']}"
    kubernetes = data["kubernetes"]
    if k8s_minor(kubernetes["version"]) not in kubernetes["supported_minors"]:
        yield "kubernetes.version", f"{kubernetes['version']} is not in supported_minors"
    yield from _serving_lab_references(data)
    base = data["container_base"]
    if not base["python_package_minimum"].startswith(base["python_version"] + "-"):
        yield (
            "container_base.python_package_minimum",
            f"{base['python_package_minimum']!r} does not package Python {base['python_version']}",
        )


def _driver_references(data: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Each source packages its driver (packages, fabric manager, dnf stream); every pin has a lifecycle."""
    driver = data["nvidia_driver"]
    branches = driver["branches"]
    if str(driver_branch(driver["version"])) not in branches:
        yield "nvidia_driver.version", f"R{driver_branch(driver['version'])} has no entry in nvidia_driver.branches"
    for branch, entry in branches.items():
        if (entry["kind"] == "new_feature") != (entry["end_of_life"] is None):
            yield (
                f"nvidia_driver.branches.{branch}.end_of_life",
                "is null exactly for a new feature branch (NVIDIA gives those no end of life date)",
            )
    for name, source in driver["sources"].items():
        key = f"nvidia_driver.sources.{name}"
        version = source.get("version", driver["version"])
        if str(driver_branch(version)) not in branches:
            yield f"{key}.version", f"R{driver_branch(version)} has no entry in nvidia_driver.branches"
        for field in ("package_version", "fabricmanager_package_version"):
            if field in source and not source[field].startswith(version):
                yield f"{key}.{field}", f"{source[field]!r} does not package the driver {version} of this source"
        for flavour, stream in source.get("dnf_module", {}).get("streams", {}).items():
            if not stream.startswith(f"{driver_branch(version)}-"):
                yield f"{key}.dnf_module.streams.{flavour}", f"{stream!r} is not a stream of R{driver_branch(version)}"


def _hardware_references(data: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Architectures named anywhere are known; every supported OS version has its kernel headers."""
    architectures = data["kernel_modules"]
    for product, entry in data["gpu_products"].items():
        if entry["architecture"] not in architectures:
            yield (
                f"gpu_products.{product}.architecture",
                f"{entry['architecture']!r} is not one of kernel_modules",
            )
    for release, entry in data["triton"]["releases"].items():
        for index, architecture in enumerate(entry["architectures"]):
            if architecture not in architectures:
                yield (
                    f"triton.releases.{release}.architectures.{index}",
                    f"{architecture!r} is not one of kernel_modules",
                )
    headers = data["kernel_headers"]
    for family, entry in data["operating_systems"].items():
        for version in entry["versions"]:
            if version not in headers.get(family, {}):
                yield f"kernel_headers.{family}", f"has no entry for {family} {version}, a supported version"
    for family in headers:
        if family not in data["operating_systems"]:
            yield f"kernel_headers.{family}", "is not one of operating_systems"


def _serving_lab_references(data: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """The lab's server is one of triton.releases; its perf_analyzer and CUDA runtime match it."""
    lab = data["serving_lab"]
    release = lab["triton"]["release"]
    if release not in data["triton"]["releases"]:
        yield "serving_lab.triton.release", f"{release!r} is not one of triton.releases"
        return
    server = lab["triton"]["server_version"]
    if server != data["triton"]["releases"][release]["server_version"]:
        yield (
            "serving_lab.triton.server_version",
            f"{server} is not the server version {data['triton']['releases'][release]['server_version']} "
            f"of release {release}",
        )
    client = lab["python_packages"]["tritonclient"]
    if client != server:
        yield (
            "serving_lab.python_packages.tritonclient",
            f"{client} is not the server version {server}: perf_analyzer must come from the same release",
        )
    cuda = data["triton"]["releases"][release]["cuda"]
    runtime = lab["python_packages"]["nvidia-cuda-runtime-cu12"]
    if runtime.split(".")[:2] != cuda.split(".")[:2]:
        yield (
            "serving_lab.python_packages.nvidia-cuda-runtime-cu12",
            f"{runtime} is not the CUDA {cuda} of release {release} (major.minor must match)",
        )


def parse(data: Any, path: Path | str) -> Matrix:
    """Validate an already-loaded mapping; raises MatrixError on the first problem found."""
    validator = jsonschema.Draft202012Validator(MATRIX_SCHEMA)
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        first = errors[0]
        raise MatrixError(path, _key(first.absolute_path), first.message)
    for key, reason in _cross_references(data):
        raise MatrixError(path, key, reason)
    return Matrix(path=Path(path), data=data)


def load(path: Path | str = DEFAULT_PATH) -> Matrix:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MatrixError(path, "", f"cannot read the file: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise MatrixError(path, "", f"not valid YAML at {where}: {getattr(exc, 'problem', exc)}") from exc
    return parse(data, path)
