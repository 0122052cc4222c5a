"""What a node must look like: its effective variables from the inventory, defaulted like the roles do.

The inventory side comes from `ansible-inventory --list` (testinfra's AnsibleRunner, which merges
group_vars and host_vars exactly as Ansible does). A variable the inventory does not set takes
the role's default. Role defaults that are plain values are read from the role's file; those
that are Jinja over the platform matrix are derived here from the matrix, one function per
variable, mirroring roles/*/defaults/main.yml line for line (tests/unit/compliance checks the
two against Ansible's own rendering). The suite's own knobs are in tests/compliance/defaults.yml.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import generate_latest

from gpu_health.checks import CLOCK_EVENT_REASONS, GpuExpectation
from platform_matrix import Matrix
from tests.compliance import node_facts

REPO = Path(__file__).resolve().parents[2]
COMPLIANCE_DEFAULTS = Path(__file__).with_name("defaults.yml")

# /etc/os-release ID -> ansible_facts['distribution'], the key of the matrix's operating_systems
# (Ansible's own normalisation in ansible.module_utils.facts.system.distribution).
DISTRIBUTIONS = {"debian": "Debian", "ubuntu": "Ubuntu", "rhel": "RedHat"}


class ExpectationError(ValueError):
    """The inventory or a role file does not give a usable value: names the host, the variable and the file."""


def _yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ExpectationError(f"{path}: cannot read: {exc}") from exc
    if not isinstance(data, dict):
        raise ExpectationError(f"{path}: expected a mapping of variables")
    return data


def role_value(role: str, name: str, kind: str = "defaults") -> Any:
    """A plain (non-Jinja) value of roles/<role>/<kind>/main.yml."""
    path = REPO / "roles" / role / kind / "main.yml"
    data = _yaml(path)
    if name not in data:
        raise ExpectationError(f"{path}: {name} is not defined there (the compliance suite reads it)")
    value = data[name]
    if isinstance(value, str) and "{{" in value:
        raise ExpectationError(f"{path}: {name} is a template; derive it in tests/compliance/expectations.py")
    return value


# The Jinja defaults of roles/nvidia_driver/defaults/main.yml, over the matrix. `v` is the
# host's variables with the earlier defaults already filled in.
Derivation = Callable[[Mapping[str, Any], Matrix, str], Any]
DRIVER_DEFAULTS: dict[str, Derivation] = {
    "nvidia_driver_source": lambda v, m, distro: m.data["operating_systems"].get(distro, {}).get("driver_source", ""),
    "nvidia_driver_version": lambda v, m, distro: m.source_driver_version(v["nvidia_driver_source"]),
    "nvidia_driver_package_version": lambda v, m, distro: m.driver_source(v["nvidia_driver_source"])["package_version"],
    "nvidia_driver_kernel_module": lambda v, m, distro: m.data["nvidia_driver"]["kernel_module"],
    "nvidia_driver_userspace_packages": lambda v, m, distro: m.driver_source(v["nvidia_driver_source"])[
        "userspace_packages"
    ],
    "nvidia_driver_kernel_packages": lambda v, m, distro: m.driver_source(v["nvidia_driver_source"])["kernel_packages"][
        v["nvidia_driver_kernel_module"]
    ],
    "nvidia_driver_persistence_package": lambda v, m, distro: m.driver_source(v["nvidia_driver_source"])[
        "persistence_package"
    ],
    "nvidia_driver_upgrade_blacklist": lambda v, m, distro: m.data["nvidia_driver"]["upgrade_blacklist"],
    "nvidia_driver_fabricmanager_package": lambda v, m, distro: m.driver_source(v["nvidia_driver_source"]).get(
        "fabricmanager_package"
    ),
    "nvidia_driver_fabricmanager_package_version": lambda v, m, distro: m.driver_source(v["nvidia_driver_source"]).get(
        "fabricmanager_package_version"
    ),
}


@dataclass(frozen=True)
class MetricsTarget:
    """An add-on whose /metrics the node must serve: found by its pod label, judged by metric names."""

    name: str
    pod_label: str
    port: int
    path: str
    required_metrics: tuple[str, ...]


@dataclass(frozen=True)
class NodeExpectation:
    name: str
    distribution: str
    variables: Mapping[str, Any]
    gpu: GpuExpectation
    metrics: tuple[MetricsTarget, ...]
    metrics_skip_reason: str

    def __getitem__(self, name: str) -> Any:
        return self.variables[name]

    @property
    def gpu_count(self) -> int:
        return self.gpu.gpu_count

    @property
    def driver_packages(self) -> list[str]:
        """Userspace packages everywhere, the kernel module packages where GPUs are declared."""
        kernel = self["nvidia_driver_kernel_packages"] if self.gpu_count > 0 else []
        return [*self["nvidia_driver_userspace_packages"], *kernel]


def _plain(host: str, inventory: str, name: str, value: Any) -> Any:
    if isinstance(value, str) and "{{" in value:
        raise ExpectationError(
            f"{inventory}: host {host}: {name} is a template ({value!r}); the compliance suite reads plain values only"
        )
    return value


def limiter_metrics() -> tuple[str, ...]:
    """What the limiter agent exports before it has seen any pod: its own Metrics class, freshly made."""
    sys.path.insert(0, str(REPO / "limiter"))
    try:
        from cgroup_limiter.metrics import Metrics
    finally:
        sys.path.remove(str(REPO / "limiter"))
    exposed = node_facts.metric_names(generate_latest(Metrics().registry).decode())
    # *_created series depend on PROMETHEUS_DISABLE_CREATED_SERIES in the agent's environment.
    return tuple(name for name in exposed if not name.endswith("_created"))


def metrics_targets(variables: Mapping[str, Any]) -> tuple[tuple[MetricsTarget, ...], str]:
    if not variables["compliance_expect_addon_metrics"]:
        return (), "compliance_expect_addon_metrics is false: this fleet runs no k8s add-ons"
    if variables["gpu_fleet_gpu_count"] == 0:
        selector = role_value("k8s_addons", "k8s_addons_node_selector", "vars")
        labels = ", ".join(f"{key}={value}" for key, value in selector.items())
        return (), f"not deployed here: gpu_fleet_gpu_count is 0, and the add-ons run only on nodes labelled {labels}"
    limiter = MetricsTarget(
        "limiter",
        "cgroup-limiter",
        role_value("k8s_addons", "k8s_addons_limiter_port", "vars"),
        "/metrics",
        limiter_metrics(),
    )
    dcgm = MetricsTarget(
        "dcgm_exporter",
        "dcgm-exporter",
        role_value("k8s_addons", "k8s_addons_dcgm_exporter_port", "vars"),
        "/metrics",
        tuple(role_value("k8s_addons", "k8s_addons_dcgm_exporter_required_fields", "vars")),
    )
    return (limiter, dcgm), ""


def node_variables(host: str, hostvars: Mapping[str, Any], inventory: str) -> dict[str, Any]:
    """The suite's defaults (defaults.yml) overridden by the host's plain inventory variables."""
    for required in ("gpu_fleet_gpu_count", "gpu_fleet_gpu_product"):
        if required not in hostvars:
            raise ExpectationError(f"{inventory}: host {host}: {required} is not set (group_vars/gpu_nodes/fleet.yml)")
    variables: dict[str, Any] = {**_yaml(COMPLIANCE_DEFAULTS)}
    variables.update({k: _plain(host, inventory, k, v) for k, v in hostvars.items() if not k.startswith("ansible_")})
    try:
        variables["gpu_fleet_gpu_count"] = int(variables["gpu_fleet_gpu_count"])
        variables["compliance_gpu_max_temperature_c"] = float(variables["compliance_gpu_max_temperature_c"])
    except (TypeError, ValueError) as exc:
        raise ExpectationError(
            f"{inventory}: host {host}: gpu_fleet_gpu_count or compliance_gpu_max_temperature_c is not a number: {exc}"
        ) from exc
    return variables


def fabric_manager_required(variables: Mapping[str, Any], matrix: Matrix) -> bool:
    """preflight_fabric_manager_required's rule: the product's matrix entry fabric_manager.min_gpus <= the GPU count."""
    product = matrix.data["gpu_products"].get(variables["gpu_fleet_gpu_product"], {})
    fabric = product.get("fabric_manager") or {}
    count = variables["gpu_fleet_gpu_count"]
    return bool(fabric) and count > 0 and fabric["min_gpus"] <= count


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _count_or_none(value: Any) -> bool:
    return value is None or _count(value)


def gpu_expectation(host: str, resolved: Mapping[str, Any], matrix: Matrix, inventory: str) -> GpuExpectation:
    """The GPU checks' expectation; a knob of defaults.yml with a value of the wrong kind is refused by name."""

    def knob(name: str, valid: Callable[[Any], bool], wanted: str) -> Any:
        value = resolved[name]
        if not valid(value):
            raise ExpectationError(f"{inventory}: host {host}: {name} is {value!r}, expected {wanted}")
        return value

    xids = knob(
        "compliance_gpu_xid_fatal",
        lambda v: isinstance(v, list) and all(_count(x) for x in v),
        "a list of Xid numbers",
    )
    reasons = knob(
        "compliance_gpu_clock_event_failures",
        lambda v: isinstance(v, list) and set(v) <= set(CLOCK_EVENT_REASONS),
        f"a list of clocks event reasons out of {', '.join(CLOCK_EVENT_REASONS)}",
    )
    counts = "null or a whole number >= 0"
    return GpuExpectation(
        gpu_count=resolved["gpu_fleet_gpu_count"],
        driver_version=str(resolved["nvidia_driver_version"]),
        max_temperature_c=resolved["compliance_gpu_max_temperature_c"],
        persistence_mode=bool(resolved["compliance_gpu_persistence_mode"]),
        ecc_enabled=bool(resolved["compliance_gpu_ecc_enabled"]),
        product=str(resolved["gpu_fleet_gpu_product"]),
        fatal_xids=frozenset(xids),
        pcie_generation_judged_when_idle=knob(
            "compliance_gpu_pcie_generation_judged_when_idle", lambda v: isinstance(v, bool), "true or false"
        ),
        nvlink_active_links=knob("compliance_gpu_nvlink_active_links", _count_or_none, counts),
        ecc_volatile_uncorrected_max=knob("compliance_gpu_ecc_volatile_uncorrected_max", _count, "a whole number >= 0"),
        ecc_aggregate_uncorrected_max=knob("compliance_gpu_ecc_aggregate_uncorrected_max", _count_or_none, counts),
        clock_event_failures=frozenset(reasons),
        fabric_manager=fabric_manager_required(resolved, matrix),
    )


def resolve(host: str, variables: Mapping[str, Any], os_id: str, matrix: Matrix, inventory: str) -> NodeExpectation:
    """The node's expectation: node_variables() plus the roles' defaults for what they leave unset."""
    distribution = DISTRIBUTIONS.get(os_id)
    if distribution is None:
        raise ExpectationError(
            f"{host}: /etc/os-release ID {os_id!r} is not a supported OS ({', '.join(sorted(DISTRIBUTIONS))})"
        )
    resolved = dict(variables)
    for name, derive in DRIVER_DEFAULTS.items():
        if name not in resolved:
            try:
                resolved[name] = derive(resolved, matrix, distribution)
            except KeyError as exc:
                raise ExpectationError(
                    f"{inventory}: host {host}: cannot default {name} from the platform matrix ({exc}); set it"
                ) from exc
    resolved.setdefault("nvidia_driver_hold", role_value("nvidia_driver", "nvidia_driver_hold"))
    for name in (
        "nvidia_container_toolkit_runtime_binary",
        "nvidia_container_toolkit_default_runtime",
        "nvidia_container_toolkit_source",
    ):
        resolved.setdefault(name, role_value("nvidia_container_toolkit", name))
    gpu = gpu_expectation(host, resolved, matrix, inventory)
    targets, skip = metrics_targets(resolved)
    return NodeExpectation(host, distribution, resolved, gpu, targets, skip)


def probe_spec(variables: Mapping[str, Any], matrix: Matrix, files: list[str]) -> dict[str, Any]:
    """What node_facts.collect reads, known before the node's OS: every driver package any source names."""
    names = {matrix.data["containerd"]["package"]}
    for source in matrix.data["nvidia_driver"]["sources"].values():
        names.update(source["userspace_packages"])
        for packages in source["kernel_packages"].values():
            names.update(packages)
    for override in ("nvidia_driver_userspace_packages", "nvidia_driver_kernel_packages"):
        names.update(variables.get(override, []))
    targets, _ = metrics_targets(variables)
    return {
        "packages": sorted(names),
        "services": [matrix.data["containerd"]["package"]],
        "files": files,
        "kernel_module": "nvidia",
        "metrics": [{"name": t.name, "pod_label": t.pod_label, "port": t.port, "path": t.path} for t in targets],
    }
