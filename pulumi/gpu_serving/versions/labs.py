"""What the two labs of this repository run, read from data: the VM lab's driver from the platform
matrix, the serving lab's Triton from the wheel its lock pins. Which checks run on which layer is
declared here; every version in a statement comes from the matrix, a stack or a lock."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platform_matrix

# The lock of the serving lab's tritonserver wheel (locked_envs: `.venv-triton`, installed --no-deps).
SERVING_LAB_LOCK = "requirements-triton-no-deps.lock"
# The OS family the VM lab's nodes run (lab_fleet/image.py debootstraps them); its versions and
# its driver come from the matrix's operating_systems and nvidia_driver.sources.
VM_LAB_OS_FAMILY = "Debian"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


class VersionsError(ValueError):
    """An input of the versions page that cannot be read or disagrees with another; names the file."""


def _normalized(name: str) -> str:
    """A distribution name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_version(lock: Path, distribution: str) -> str:
    """The version `lock` pins `distribution` at (`name==version` lines, as uv writes them)."""
    try:
        text = lock.read_text(encoding="utf-8")
    except OSError as exc:
        raise VersionsError(f"{lock.name}: cannot read the lock: {exc.strerror}") from exc
    for line in text.splitlines():
        match = _PIN.match(line)
        if match and _normalized(match.group(1)) == _normalized(distribution):
            return match.group(2)
    raise VersionsError(f"{lock.name}: pins no {distribution}")


@dataclass(frozen=True)
class ServingLab:
    """The serving lab's tritonserver (on the CPU) and its Prometheus and Alertmanager."""

    wheel: str
    wheel_version: str
    release: str
    server_version: str
    prometheus: str
    alertmanager: str


def serving_lab(matrix: platform_matrix.Matrix, root: Path) -> ServingLab:
    """The lab's Triton as the lock pins its wheel; the matrix says which server that wheel carries."""
    lab = matrix.serving_lab
    wheel = lab["triton"]["wheel"]
    locked = locked_version(root / SERVING_LAB_LOCK, wheel)
    if locked != lab["triton"]["wheel_version"]:
        raise VersionsError(
            f"{SERVING_LAB_LOCK}: pins {wheel} {locked}, but serving_lab.triton.wheel_version in "
            f"platform_matrix/matrix.yml is {lab['triton']['wheel_version']}: run `make lock`"
        )
    packages = lab["debian_packages"]
    return ServingLab(
        wheel=wheel,
        wheel_version=locked,
        release=lab["triton"]["release"],
        server_version=lab["triton"]["server_version"],
        prometheus=packages["prometheus"],
        alertmanager=packages["prometheus-alertmanager"],
    )


@dataclass(frozen=True)
class VmLab:
    """The VM lab's nodes: Debian without a GPU, with the driver of Debian's own source."""

    os_family: str
    os_versions: tuple[str, ...]
    driver_source: str
    driver_version: str


def vm_lab(matrix: platform_matrix.Matrix) -> VmLab:
    source = matrix.os_driver_source(VM_LAB_OS_FAMILY)
    if source is None:
        raise VersionsError(f"platform_matrix/matrix.yml: operating_systems has no {VM_LAB_OS_FAMILY}, the VM lab's OS")
    return VmLab(
        os_family=VM_LAB_OS_FAMILY,
        os_versions=tuple(matrix.data["operating_systems"][VM_LAB_OS_FAMILY]["versions"]),
        driver_source=source,
        driver_version=matrix.source_driver_version(source),
    )


@dataclass(frozen=True)
class Labs:
    serving: ServingLab
    vm: VmLab


def labs(matrix: platform_matrix.Matrix, root: Path) -> Labs:
    return Labs(serving=serving_lab(matrix, root), vm=vm_lab(matrix))


NEVER_PULLED = "was never pulled or run here (no registry is reachable)"
# Where a driver that no lab installs is still checked offline, per matrix source.
OFFLINE_DRIVER_CHECKS: Mapping[str, str] = {
    "cuda-repo-ubuntu": "preflight and the matrix rules (package names, branch, fabric manager, headers)",
    "cuda-repo-rhel": "preflight and the matrix rules, the role's tasks rendered for RHEL facts",
}
# What is checked of a chart's release although no cluster installs it, per chart of the matrix.
CHART_CHECKS: Mapping[str, str] = {
    "kube-prometheus-stack": (
        "its rendered rules and Alertmanager config run in the serving lab, "
        "on Debian's Prometheus {prometheus} and Alertmanager {alertmanager}"
    ),
    "istio-base": "the rendered Istio objects pass Istio's CRD models",
    "istiod": "the rendered Istio objects pass Istio's CRD models",
    "istio-gateway": "the rendered Istio objects pass Istio's CRD models",
    "argo-cd": "the rendered Applications and AppProjects pass Argo CD's schemas",
    "prometheus-adapter": "its rule reads only metrics that the rules produce",
    "argo-rollouts": (
        "the rendered Rollout and AnalysisTemplates pass the controller's schemas, "
        "and the canary decisions run against the serving lab's Prometheus"
    ),
}
# What runs here of an image built from this repository, per image of a stack or of the matrix.
BUILT_HERE: Mapping[str, str] = {
    "gateway": "`make image-gateway` builds it from serving/; the serving lab runs that build against tritonserver",
    "drift-agent": "`make image-drift` builds it from serving/; the serving lab runs that build against the gateway",
    "io_limiter": "`make image-limiter` builds it from limiter/; the VM lab runs that build under containerd",
}


def driver_proof(lab: VmLab, os_family: str, source: str, version: str) -> str:
    """What the labs prove of the driver `version` from `source` on nodes of `os_family`."""
    if os_family == lab.os_family and source == lab.driver_source and version == lab.driver_version:
        return "installed by the VM lab (userspace packages, pinned and held); the module and NVML never ran: no GPU"
    offline = OFFLINE_DRIVER_CHECKS.get(source, "preflight and the matrix rules")
    return (
        f"never ran: NVIDIA's repositories are unreachable here and no GPU was lent (the VM lab runs "
        f"{lab.os_family}'s {lab.driver_version}); checked offline: {offline}"
    )


def triton_proof(lab: ServingLab, release: str) -> str:
    """What the labs prove of an environment's Triton `release`."""
    if release == lab.release:
        return (
            f"run by the serving lab: tritonserver {lab.server_version} ({lab.wheel} {lab.wheel_version}) "
            f"on the CPU, no GPU; the NGC image {NEVER_PULLED}"
        )
    return (
        f"not run by any lab (the serving lab runs {lab.release}, server {lab.server_version}, on the CPU); "
        f"{release} is validated only: its rendered Rollout (schemas, policy pack) and the model configs "
        f"against {release}'s own model_config.proto; the image {NEVER_PULLED}"
    )


def chart_proof(lab: ServingLab, chart: str) -> str:
    """What the labs prove of a chart release that no cluster here installs."""
    extra = CHART_CHECKS.get(chart)
    proof = "not installed (no Kubernetes cluster here)"
    return f"{proof}; {extra.format(prometheus=lab.prometheus, alertmanager=lab.alertmanager)}" if extra else proof


def image_proof(image: str) -> str:
    """What the labs prove of a pinned image: built here under another tag, or never run."""
    built = BUILT_HERE.get(image)
    if built is None:
        return f"the image {NEVER_PULLED}; the rendered manifests that use it are checked offline"
    return f"this tag {NEVER_PULLED}; {built}"


def lab_release_sentence(lab: ServingLab, deployed: Mapping[str, str]) -> str:
    """The one sentence about the lab's release and the environments that deploy it."""
    running = sorted(env for env, release in deployed.items() if release == lab.release)
    where = ", ".join(running) if running else "no environment"
    return f"The serving lab's tritonserver is release {lab.release}, which {where} deploys"
