"""The node checks (driver pin, cgroup v2, containerd, kernel module, metrics): pure functions of
the facts node_facts.collect read and the node's expectation; each returns an Outcome."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from typing import Any

from gpu_health.checks import Outcome
from tests.compliance.expectations import NodeExpectation

# The files the roles write (roles/nvidia_driver/tasks/apt.yml, roles/nvidia_container_toolkit/tasks/main.yml).
APT_PIN = "/etc/apt/preferences.d/nvidia-driver.pref"
UPGRADE_BLACKLIST = "/etc/apt/apt.conf.d/51nvidia-driver-blacklist"
TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
FILES = [APT_PIN, UPGRADE_BLACKLIST, TOOLKIT_CONFIG]
# containerd's runtimes live in the role's drop-in; the checks judge `containerd config dump`,
# the main file merged with its imports as containerd itself reads them.
CONTAINERD_DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
CONTAINERD_DUMP = "containerd config dump"
# What the toolkit must hold so that an unprivileged container cannot pick GPUs by environment
# variable (roles/nvidia_container_toolkit/vars/main.yml), with the toolkit's own defaults.
TOOLKIT_ISOLATION = {
    "accept-nvidia-visible-devices-envvar-when-unprivileged": (False, True),
    "accept-nvidia-visible-devices-as-volume-mounts": (True, False),
}

# containerd's CRI plugin keeps the runtimes here: config version 2 (containerd 1.x) and 3 (2.x).
CRI_RUNTIME_TABLES = {
    2: ("io.containerd.grpc.v1.cri", "containerd", "runtimes"),
    3: ("io.containerd.cri.v1.runtime", "containerd", "runtimes"),
}

Facts = Mapping[str, Any]


def driver_packages(facts: Facts, expected: NodeExpectation) -> Outcome:
    pin = expected["nvidia_driver_package_version"]
    installed = facts["packages"]["installed"]
    problems = []
    for name in expected.driver_packages:
        if name not in installed:
            problems.append(f"{name} is not installed")
        elif installed[name]["version"] != pin:
            problems.append(f"{name} is at {installed[name]['version']}")
    wanted = ", ".join(expected.driver_packages)
    if problems:
        return Outcome.failed(
            f"{'; '.join(problems)}; the pin (nvidia_driver_package_version, {expected['nvidia_driver_source']}) "
            f"is {pin}"
        )
    return Outcome.passed(f"{wanted} at {pin}")


def driver_held(facts: Facts, expected: NodeExpectation) -> Outcome:
    if not expected["nvidia_driver_hold"]:
        return Outcome.skipped("nvidia_driver_hold is false for this node: the packages are pinned but not held")
    packages = facts["packages"]
    lock = "hold" if packages["manager"] == "dpkg" else "versionlock"
    loose = [
        f"{name} ({packages['installed'][name]['selection']})"
        for name in expected.driver_packages
        if name in packages["installed"] and packages["installed"][name]["selection"] != lock
    ]
    if loose:
        fix = "apt-mark hold" if lock == "hold" else "dnf versionlock add"
        return Outcome.failed(f"not {lock}: {', '.join(loose)}; run site.yml or `{fix}` them")
    return Outcome.passed(f"{', '.join(expected.driver_packages)}: {lock}")


def apt_pin(facts: Facts, expected: NodeExpectation) -> Outcome:
    if facts["packages"]["manager"] != "dpkg":
        return Outcome.skipped("not an apt node: dnf versionlock pins the version (see driver_held)")
    text = facts["files"][APT_PIN]
    if text is None:
        return Outcome.failed(f"{APT_PIN} is missing")
    pin = expected["nvidia_driver_package_version"]
    patterns = " ".join(f"{prefix}*" for prefix in expected["nvidia_driver_upgrade_blacklist"])
    problems = []
    if not re.search(rf"^Pin: version {re.escape(pin)}$", text, re.MULTILINE):
        problems.append(f"it does not pin version {pin}")
    if not re.search(rf"^Package: {re.escape(patterns)}$", text, re.MULTILINE):
        problems.append(f"its Package line is not `{patterns}`")
    if not re.search(r"^Pin-Priority: 1001$", text, re.MULTILINE):
        problems.append("its priority is not 1001 (needed to hold a downgrade to the pin)")
    return Outcome.failed(f"{APT_PIN}: {'; '.join(problems)}") if problems else Outcome.passed(f"{APT_PIN} pins {pin}")


def upgrade_blacklist(facts: Facts, expected: NodeExpectation) -> Outcome:
    if facts["packages"]["manager"] != "dpkg":
        return Outcome.skipped("not an apt node: unattended-upgrades is Debian and Ubuntu only")
    text = facts["files"][UPGRADE_BLACKLIST]
    if text is None:
        return Outcome.failed(f"{UPGRADE_BLACKLIST} is missing: unattended-upgrades may replace the driver")
    block = re.search(r"Unattended-Upgrade::Package-Blacklist\s*\{(.*?)\};", text, re.DOTALL)
    listed = re.findall(r'"([^"]+)";', block.group(1)) if block else []
    missing = [prefix for prefix in expected["nvidia_driver_upgrade_blacklist"] if prefix not in listed]
    if missing:
        return Outcome.failed(
            f"{UPGRADE_BLACKLIST}: Unattended-Upgrade::Package-Blacklist lacks {', '.join(missing)} "
            "(nvidia_driver_upgrade_blacklist)"
        )
    return Outcome.passed(f"unattended-upgrades skips {', '.join(listed)}")


def cgroup_unified(facts: Facts, expected: NodeExpectation) -> Outcome:
    fs_type = facts["cgroup"]["fs_type"]
    if fs_type != "cgroup2":
        return Outcome.failed(
            f"/sys/fs/cgroup is {fs_type or 'not mounted'}, not cgroup2: boot with systemd.unified_cgroup_hierarchy=1"
        )
    return Outcome.passed("/sys/fs/cgroup is the cgroup v2 unified hierarchy")


def cgroup_controllers(facts: Facts, expected: NodeExpectation) -> Outcome:
    available = facts["cgroup"]["controllers"]
    wanted = list(expected["compliance_cgroup_controllers"])
    if available is None:
        return Outcome.failed("/sys/fs/cgroup/cgroup.controllers is missing (no cgroup v2)")
    missing = [name for name in wanted if name not in available]
    if missing:
        return Outcome.failed(
            f"controllers {', '.join(missing)} are not available (cgroup.controllers: {' '.join(available)})"
        )
    return Outcome.passed(f"{', '.join(wanted)} available")


def _cri_containerd(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The CRI plugin's `containerd` table (default runtime, runtimes) of a config version 2 or 3."""
    table: Any = config.get("plugins", {})
    for key in CRI_RUNTIME_TABLES.get(config.get("version", 1), ())[:-1]:
        table = table.get(key, {}) if isinstance(table, Mapping) else {}
    return table if isinstance(table, Mapping) and table.get("runtimes") else None


def _containerd_config(facts: Facts) -> tuple[Mapping[str, Any] | None, str]:
    dump = facts["containerd_config"]
    if dump["rc"] != 0:
        return None, f"`{CONTAINERD_DUMP}` failed (exit {dump['rc']}): {dump['stderr'] or dump['stdout']}"
    try:
        config = tomllib.loads(dump["stdout"])
    except tomllib.TOMLDecodeError as exc:
        return None, f"`{CONTAINERD_DUMP}` printed no valid TOML: {exc}"
    cri = _cri_containerd(config)
    if cri is None:
        return None, f"`{CONTAINERD_DUMP}` (version {config.get('version', 1)}) shows no CRI runtimes"
    return cri, ""


def containerd_nvidia_runtime(facts: Facts, expected: NodeExpectation) -> Outcome:
    cri, why = _containerd_config(facts)
    if cri is None:
        return Outcome.failed(why)
    runtimes = cri["runtimes"]
    if "nvidia" not in runtimes:
        return Outcome.failed(
            f"`{CONTAINERD_DUMP}` has no nvidia runtime (runtimes: {', '.join(sorted(runtimes))}); run site.yml"
        )
    binary = runtimes["nvidia"].get("options", {}).get("BinaryName")
    wanted = expected["nvidia_container_toolkit_runtime_binary"]
    if binary != wanted:
        return Outcome.failed(
            f"the nvidia runtime's BinaryName is {binary!r}, "
            f"expected {wanted!r} (nvidia_container_toolkit_runtime_binary)"
        )
    return Outcome.passed(f"runtimes.nvidia runs {binary}")


def containerd_systemd_cgroup(facts: Facts, expected: NodeExpectation) -> Outcome:
    cri, why = _containerd_config(facts)
    if cri is None:
        return Outcome.failed(why)
    wrong = [
        name
        for name in ("runc", "nvidia")
        if cri["runtimes"].get(name, {}).get("options", {}).get("SystemdCgroup") is not True
    ]
    if wrong:
        return Outcome.failed(f"SystemdCgroup is not true for the runtime(s) {', '.join(wrong)} in `{CONTAINERD_DUMP}`")
    return Outcome.passed("runc and nvidia use the systemd cgroup driver")


def containerd_default_runtime(facts: Facts, expected: NodeExpectation) -> Outcome:
    cri, why = _containerd_config(facts)
    if cri is None:
        return Outcome.failed(why)
    default, wanted = cri.get("default_runtime_name"), expected["nvidia_container_toolkit_default_runtime"]
    if default != wanted:
        return Outcome.failed(
            f"default_runtime_name is {default!r} in `{CONTAINERD_DUMP}`, expected {wanted!r} "
            "(nvidia_container_toolkit_default_runtime); run site.yml"
        )
    return Outcome.passed(f"pods without a RuntimeClass run {default}")


def toolkit_isolation(facts: Facts, expected: NodeExpectation) -> Outcome:
    if expected["nvidia_container_toolkit_source"] == "none":
        return Outcome.skipped("nvidia_container_toolkit_source is none: no toolkit on this node")
    text = facts["files"][TOOLKIT_CONFIG]
    if text is None:
        return Outcome.failed(f"{TOOLKIT_CONFIG} is missing; run site.yml")
    try:
        config = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return Outcome.failed(f"{TOOLKIT_CONFIG} is not valid TOML: {exc}")
    wrong = []
    for key, (want, default) in TOOLKIT_ISOLATION.items():
        value = config.get(key, default)
        if value is not want:
            shown = str(value).lower() if key in config else f"unset (default {str(default).lower()})"
            wrong.append(f"{key} is {shown}, not {str(want).lower()}")
    if wrong:
        return Outcome.failed(
            f"{TOOLKIT_CONFIG}: {'; '.join(wrong)}: unprivileged containers can pick GPUs with NVIDIA_VISIBLE_DEVICES"
            "; run site.yml"
        )
    return Outcome.passed("unprivileged containers get GPUs only as the device plugin's volume mounts")


def containerd_running(facts: Facts, expected: NodeExpectation) -> Outcome:
    state = next(iter(facts["services"].values()), "")
    if state != "active":
        return Outcome.failed(f"containerd is {state or 'unknown'} (systemctl is-active), not active")
    return Outcome.passed("containerd is active")


def kernel_module(facts: Facts, expected: NodeExpectation) -> Outcome:
    packages = ", ".join(expected["nvidia_driver_kernel_packages"])
    if expected.gpu_count == 0:
        return Outcome.skipped(
            f"gpu_fleet_gpu_count is 0: the {expected['nvidia_driver_kernel_module']} kernel module ({packages}) "
            "is installed only on GPU nodes"
        )
    kernel, version = facts["kernel"], expected["nvidia_driver_version"]
    modinfo, dkms = facts["modinfo"], facts["dkms"]
    problems = []
    if modinfo["rc"] != 0:
        problems.append(f"modinfo -k {kernel} nvidia: {modinfo['stderr'] or 'exit ' + str(modinfo['rc'])}")
    elif modinfo["stdout"].strip() != version:
        problems.append(f"modinfo -k {kernel} nvidia shows version {modinfo['stdout'].strip()}")
    built = [
        line
        for line in dkms["stdout"].splitlines()
        if line.startswith("nvidia") and version in line and kernel in line and line.rstrip().endswith("installed")
    ]
    if not built:
        shown = dkms["stdout"].strip() or dkms["stderr"] or "nothing"
        problems.append(f"dkms status has no nvidia {version} installed for {kernel} ({shown})")
    if problems:
        return Outcome.failed(f"{'; '.join(problems)}; the pin is {version} ({packages})")
    return Outcome.passed(f"nvidia {version} built by DKMS for {kernel}")


def addon_metrics(facts: Facts, expected: NodeExpectation, name: str) -> Outcome:
    target = next((t for t in expected.metrics if t.name == name), None)
    if target is None:
        return Outcome.skipped(expected.metrics_skip_reason)
    seen = facts["metrics"].get(name)
    if seen is None or seen["error"]:
        why = seen["error"] if seen else "not probed"
        return Outcome.failed(f"{name} is expected here but does not serve {target.path} on port {target.port}: {why}")
    missing = [metric for metric in target.required_metrics if metric not in seen["metric_names"]]
    if missing:
        return Outcome.failed(f"{seen['url']} lacks {', '.join(missing)}")
    return Outcome.passed(f"{seen['url']} serves {len(seen['metric_names'])} metric families")
