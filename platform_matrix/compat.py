"""Compatibility rules: is this combination of versions and hardware supported, and if not, why."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

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
    """Some GPUs need a minimum driver branch of their own."""
    if stack.gpu_product is None or stack.driver_version is None:
        return
    try:
        product = matrix.gpu_product(stack.gpu_product)
    except KeyError as exc:
        yield Problem("gpu_product", str(exc.args[0]), ("gpu_product",))
        return
    needed = product.get("min_driver_branch")
    if needed and driver_branch(stack.driver_version) < needed:
        yield Problem(
            "product_driver",
            f"{stack.gpu_product} needs driver R{needed} or later, the pin is {stack.driver_version}",
            ("gpu_product", "driver_version"),
        )


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
    """The matrix's own pins, overridden by an environment's choices."""
    data = matrix.data
    defaults: dict[str, object] = {
        "triton_release": data["triton"]["default_release"],
        "driver_version": data["nvidia_driver"]["version"],
        "kernel_module": data["nvidia_driver"]["kernel_module"],
        "container_toolkit": data["container_toolkit"]["version"],
        "kubernetes_version": data["kubernetes"]["version"],
    }
    defaults.update({key: value for key, value in choices.items() if value is not None})
    return Stack(**defaults)  # type: ignore[arg-type]
