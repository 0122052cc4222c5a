"""Compatibility rules: is this combination of versions and hardware supported, and if not, why."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

from platform_matrix.kernel import KernelHeadersError, headers_package, kernel_flavour
from platform_matrix.lifecycle import unsupported_reason, waiver_problems
from platform_matrix.matrix import Matrix, driver_branch, k8s_minor, version_tuple


@dataclass(frozen=True)
class Stack:
    """One environment's choices. None means "not decided here" and skips the rules on it."""

    triton_release: str | None = None
    driver_version: str | None = None
    gpu_product: str | None = None
    kernel_module: str | None = None
    container_toolkit: str | None = None
    cgroup_v2: bool = True
    kubernetes_version: str | None = None
    mig_strategy: str = "none"
    cuda_forward_compat: bool = False
    os_family: str | None = None
    os_version: str | None = None
    driver_source: str | None = None
    kernel_release: str | None = None
    gpu_count: int = 0
    driver_eol_waiver: Mapping[str, Any] | None = None
    # The branch the inventory says its fleet runs ("580"); None: no expectation.
    fleet_driver_branch: str | None = None
    # The day the lifecycle is judged on; None: today.
    today: date | None = None


@dataclass(frozen=True)
class Problem:
    """One broken rule; `fields` names the Stack fields whose values break it."""

    rule: str
    message: str
    fields: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"[{self.rule}] {self.message}"


Rule = Callable[[Matrix, Stack], Iterator[Problem]]


def triton_driver(matrix: Matrix, stack: Stack) -> Iterator[Problem]:
    """The driver must run the CUDA that the Triton release was built with."""
    if stack.triton_release is None or stack.driver_version is None:
        return
    try:
        release = matrix.triton_release(stack.triton_release)
    except KeyError as exc:
        yield Problem("triton_driver", str(exc.args[0]), ("triton_release",))
        return
    needed = release["min_driver_branch"]
    have = driver_branch(stack.driver_version)
    if have >= needed:
        return
    compat_minimum = next((c for c in release["forward_compat"] if driver_branch(c) == have), None)
    why = (
        f"Triton {stack.triton_release} (CUDA {release['cuda']}) needs driver R{needed} or later, "
        f"the pin is {stack.driver_version}"
    )
    if compat_minimum is None:
        yield Problem(
            "triton_driver",
            f"{why}, and R{have} is not forward compatible with CUDA {release['cuda']}",
            ("triton_release", "driver_version"),
        )
    elif not stack.cuda_forward_compat:
        yield Problem(
            "triton_driver",
            f"{why}; R{have} from {compat_minimum} works only through CUDA forward compatibility, "
            "which this environment has not enabled (cuda_forward_compat: true, data center GPUs only)",
            ("triton_release", "driver_version"),
        )
    elif version_tuple(stack.driver_version) < version_tuple(compat_minimum):
        yield Problem(
            "triton_driver",
            f"{why}; forward compatibility on R{have} needs {compat_minimum} or later",
            ("triton_release", "driver_version"),
        )
    elif stack.gpu_product in matrix.data["gpu_products"] and not matrix.gpu_product(stack.gpu_product)["datacenter"]:
        yield Problem(
            "triton_driver",
            f"{why}; forward compatibility needs a data center GPU, not {stack.gpu_product}",
            ("triton_release", "driver_version"),
        )


def product_driver(matrix: Matrix, stack: Stack) -> Iterator[Problem]:
    """Some GPUs need a minimum driver of their own; forward compatibility does not lower it."""
    if stack.gpu_product is None or stack.driver_version is None:
        return
    try:
        product = matrix.gpu_product(stack.gpu_product)
    except KeyError as exc:
        yield Problem("gpu_product", str(exc.args[0]), ("gpu_product",))
        return
    needed = product.get("min_driver")
    if needed and version_tuple(stack.driver_version) < version_tuple(needed):
        compat = "; CUDA forward compatibility does not change that" if stack.cuda_forward_compat else ""
        yield Problem(
            "product_driver",
            f"{stack.gpu_product} needs driver {needed} or later, the pin is {stack.driver_version}{compat}",
            ("gpu_product", "driver_version"),
        )


def triton_gpu(matrix: Matrix, stack: Stack) -> Iterator[Problem]:
    """A Triton release runs on the compute capabilities and architectures its release notes name."""
    if stack.triton_release is None or stack.gpu_product is None:
        return
    releases, products = matrix.data["triton"]["releases"], matrix.data["gpu_products"]
    if stack.triton_release not in releases or stack.gpu_product not in products:
        return  # reported by triton_driver and product_driver
    release, product = releases[stack.triton_release], products[stack.gpu_product]
    name = f"{stack.gpu_product} ({product['architecture']}, compute capability {product['compute_capability']})"
    if version_tuple(product["compute_capability"]) < version_tuple(release["min_compute_capability"]):
        yield Problem(
            "triton_gpu",
            f"Triton {stack.triton_release} needs compute capability {release['min_compute_capability']} "
            f"or later, not {name}",
            ("triton_release", "gpu_product"),
        )
    elif product["architecture"] not in release["architectures"]:
        yield Problem(
            "triton_gpu",
            f"Triton {stack.triton_release} (CUDA {release['cuda']}) does not support {name}; it runs on "
            f"{', '.join(release['architectures'])}",
            ("triton_release", "gpu_product"),
        )


def fabric_manager_required(product: Mapping[str, Any], gpu_count: int) -> bool:
    """NVSwitch baseboards: the product's fabric_manager entry and the GPUs on the node."""
    entry = product.get("fabric_manager") or {}
    return bool(entry) and gpu_count >= entry["min_gpus"]


def fabric_manager(matrix: Matrix, stack: Stack) -> Iterator[Problem]:
    """Every product says whether it needs Fabric Manager; an NVSwitch node needs a source that has it."""
    if stack.gpu_product is None or stack.gpu_product not in matrix.data["gpu_products"]:
        return  # unknown products: product_driver
    product = matrix.gpu_product(stack.gpu_product)
    if "fabric_manager" not in product:
        yield Problem(
            "fabric_manager",
            f"{stack.gpu_product} has no fabric_manager entry in gpu_products of the platform matrix; say "
            "whether its nodes need NVIDIA Fabric Manager (false, or {min_gpus: N} for NVSwitch baseboards)",
            ("gpu_product",),
        )
        return
    sources = matrix.data["nvidia_driver"]["sources"]
    if not fabric_manager_required(product, stack.gpu_count) or stack.driver_source not in sources:
        return
    if "fabricmanager_package" not in sources[stack.driver_source]:
        yield Problem(
            "fabric_manager",
            f"{stack.gpu_count} x {stack.gpu_product} is an NVSwitch system that needs NVIDIA Fabric Manager, "
            f"which the driver source {stack.driver_source} does not package; use NVIDIA's repository (Ubuntu, RHEL)",
            ("gpu_product", "driver_source"),
        )


def _supported_branches(matrix: Matrix, on: date) -> list[str]:
    branches = matrix.data["nvidia_driver"]["branches"]
    return [f"R{b}" for b in sorted(branches) if unsupported_reason(b, branches[b], on) is None]


def driver_lifecycle(matrix: Matrix, stack: Stack) -> Iterator[Problem]:
    """The pin's branch is inside NVIDIA's support, or the inventory waives it by name with a reason."""
    if stack.driver_version is None:
        return
    on = stack.today or date.today()
    waiver = stack.driver_eol_waiver or {}
    invalid = list(waiver_problems(waiver, on)) if waiver else []
    for reason in invalid:
        yield Problem("driver_eol_waiver", reason, ("driver_eol_waiver",))
    branch = str(driver_branch(stack.driver_version))
    why = unsupported_reason(branch, matrix.data["nvidia_driver"]["branches"].get(branch), on)
    if why is None or (waiver and not invalid and str(waiver["branch"]) == branch):
        return
    if waiver and not invalid:
        hint = f"the waiver names R{waiver['branch']}, not R{branch}"
    else:
        supported = ", ".join(_supported_branches(matrix, on)) or "none in the matrix"
        hint = (
            f"pin a supported branch ({supported}) or accept R{branch} explicitly with a waiver "
            f'{{branch: "{branch}", reason: "..."}}'
        )
    yield Problem("driver_lifecycle", f"{why}; {hint}", ("driver_version", "driver_eol_waiver"))


def fleet_branch(matrix: Matrix, stack: Stack) -> Iterator[Problem]:
    """The inventory's expected branch (say R580 on NVIDIA's repositories) is the branch it gets."""
    if not stack.fleet_driver_branch or stack.driver_version is None:
        return
    branch = str(driver_branch(stack.driver_version))
    if branch != str(stack.fleet_driver_branch):
        source = f" from {stack.driver_source}" if stack.driver_source else ""
        yield Problem(
            "fleet_branch",
            f"the fleet runs R{stack.fleet_driver_branch}, this node would get {stack.driver_version}{source}",
            ("fleet_driver_branch", "driver_version"),
        )


def kernel_headers(matrix: Matrix, stack: Stack) -> Iterator[Problem]:
    """The running kernel's flavour has a headers metapackage on this OS version."""
    if stack.kernel_release is None or stack.os_family is None or stack.os_version is None:
        return
    if stack.os_version not in matrix.data["operating_systems"].get(stack.os_family, {}).get("versions", []):
        return  # reported by operating_system
    try:
        headers_package(matrix.data, stack.os_family, stack.os_version, stack.kernel_release)
    except KernelHeadersError as exc:
        yield Problem("kernel_headers", str(exc), ("kernel_release",))


def kernel_module(matrix: Matrix, stack: Stack) -> Iterator[Problem]:
    """Open modules need Turing or later; Blackwell needs open modules."""
    if stack.gpu_product is None or stack.kernel_module is None:
        return
    if stack.gpu_product not in matrix.data["gpu_products"]:
        return  # reported by product_driver
    architecture = matrix.gpu_product(stack.gpu_product)["architecture"]
    allowed = matrix.data["kernel_modules"][architecture]
    if stack.kernel_module not in allowed:
        yield Problem(
            "kernel_module",
            f"{stack.gpu_product} ({architecture}) cannot run the {stack.kernel_module} kernel module; "
            f"use {' or '.join(allowed)}",
            ("kernel_module", "gpu_product"),
        )


def toolkit_version(matrix: Matrix, stack: Stack) -> Iterator[Problem]:
    """The container toolkit has a security floor and a cgroup v2 floor."""
    if stack.container_toolkit is None:
        return
    toolkit = matrix.data["container_toolkit"]
    have = version_tuple(stack.container_toolkit)
    if have < version_tuple(toolkit["min_version"]):
        yield Problem(
            "toolkit_version",
            f"nvidia-container-toolkit {stack.container_toolkit} is below the security floor {toolkit['min_version']}",
            ("container_toolkit",),
        )
    if stack.cgroup_v2 and have < version_tuple(toolkit["min_version_cgroup_v2"]):
        yield Problem(
            "toolkit_cgroup_v2",
            f"nvidia-container-toolkit {stack.container_toolkit} on cgroup v2 loses GPU access after a "
            f"systemd daemon-reload; use {toolkit['min_version_cgroup_v2']} or later",
            ("container_toolkit", "cgroup_v2"),
        )


def kubernetes_version(matrix: Matrix, stack: Stack) -> Iterator[Problem]:
    if stack.kubernetes_version is None:
        return
    supported = matrix.data["kubernetes"]["supported_minors"]
    if k8s_minor(stack.kubernetes_version) not in supported:
        yield Problem(
            "kubernetes_version",
            f"Kubernetes {stack.kubernetes_version} is outside the add-ons' supported minors {', '.join(supported)}",
            ("kubernetes_version",),
        )


def mig_strategy(matrix: Matrix, stack: Stack) -> Iterator[Problem]:
    if stack.mig_strategy not in ("none", "single", "mixed"):
        yield Problem(
            "mig_strategy",
            f"unknown MIG strategy {stack.mig_strategy!r}; use none, single or mixed",
            ("mig_strategy", "gpu_product"),
        )
        return
    if stack.mig_strategy == "none" or stack.gpu_product is None:
        return
    if stack.gpu_product in matrix.data["gpu_products"] and not matrix.gpu_product(stack.gpu_product)["mig"]:
        yield Problem(
            "mig_strategy",
            f"MIG {stack.mig_strategy} needs a MIG-capable GPU; {stack.gpu_product} is not",
            ("mig_strategy", "gpu_product"),
        )


def operating_system(matrix: Matrix, stack: Stack) -> Iterator[Problem]:
    if stack.os_family is None:
        return
    systems = matrix.data["operating_systems"]
    entry = systems.get(stack.os_family)
    if entry is None:
        yield Problem(
            "operating_system",
            f"OS family {stack.os_family!r} is not supported (supported: {', '.join(systems)})",
            ("os_family", "os_version"),
        )
    elif stack.os_version is not None and stack.os_version not in entry["versions"]:
        yield Problem(
            "operating_system",
            f"{stack.os_family} {stack.os_version} is not supported (supported: {', '.join(entry['versions'])})",
            ("os_family", "os_version"),
        )


RULES: tuple[Rule, ...] = (
    triton_driver,
    product_driver,
    triton_gpu,
    driver_lifecycle,
    fleet_branch,
    fabric_manager,
    kernel_headers,
    kernel_module,
    toolkit_version,
    kubernetes_version,
    mig_strategy,
    operating_system,
)


def check(matrix: Matrix, stack: Stack) -> list[Problem]:
    """Every problem with `stack`, in rule order; an empty list means compatible."""
    return [problem for rule in RULES for problem in rule(matrix, stack)]


def pinned_stack(matrix: Matrix, **choices: object) -> Stack:
    """The matrix's own pins, overridden by an environment's choices.

    The driver source follows the OS family, and the driver the source packages (the fleet pin,
    or the source's own version where it cannot package the pin)."""
    data = matrix.data
    given = {key: value for key, value in choices.items() if value is not None}
    source = given.get("driver_source")
    if source is None and isinstance(given.get("os_family"), str):
        source = matrix.os_driver_source(given["os_family"])
    sources = data["nvidia_driver"]["sources"]
    defaults: dict[str, object] = {
        "triton_release": data["triton"]["default_release"],
        "driver_version": matrix.source_driver_version(source) if source in sources else matrix.driver_version,
        "driver_source": source,
        "kernel_module": data["nvidia_driver"]["kernel_module"],
        "container_toolkit": data["container_toolkit"]["version"],
        "kubernetes_version": data["kubernetes"]["version"],
    }
    defaults.update(given)
    return Stack(**defaults)  # type: ignore[arg-type]


def node_facts(matrix: Matrix, stack: Stack) -> dict[str, object]:
    """What the roles after preflight need from the matrix for one node (roles/preflight sets them).

    Values that cannot be known are empty; check() reports why, and preflight stops there."""
    product = matrix.data["gpu_products"].get(stack.gpu_product or "", {})
    flavour = headers = ""
    family, version, release = stack.os_family or "", stack.os_version or "", stack.kernel_release
    system = matrix.data["operating_systems"].get(family)
    if system and release:
        flavour = kernel_flavour(release, system["package_manager"])
        if version in system["versions"]:
            with contextlib.suppress(KernelHeadersError):
                flavour, headers = headers_package(matrix.data, family, version, release)
    branch = str(driver_branch(stack.driver_version)) if stack.driver_version else ""
    return {
        "driver_branch": branch,
        "driver_source": stack.driver_source or "",
        "fabric_manager_required": fabric_manager_required(product, stack.gpu_count),
        "kernel_flavour": flavour,
        "kernel_headers_package": headers,
    }
