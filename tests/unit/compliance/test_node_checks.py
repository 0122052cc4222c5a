"""The node checks on facts recorded from a converged lab node, and on those facts broken as the lab breaks a node."""

from __future__ import annotations

import re

import pytest

from tests.compliance import node_checks
from tests.compliance.node_checks import APT_PIN, CONTAINERD_DROP_IN, TOOLKIT_CONFIG, UPGRADE_BLACKLIST

CHECKS = [
    node_checks.driver_packages,
    node_checks.driver_held,
    node_checks.apt_pin,
    node_checks.upgrade_blacklist,
    node_checks.cgroup_unified,
    node_checks.cgroup_controllers,
    node_checks.containerd_nvidia_runtime,
    node_checks.containerd_systemd_cgroup,
    node_checks.containerd_default_runtime,
    node_checks.containerd_running,
]
# The head of /etc/nvidia-container-runtime/config.toml as the toolkit's postinst writes it
# (`nvidia-ctk config`, expected output of api/config/v1/toml_test.go in NVIDIA/nvidia-container-toolkit).
TOOLKIT_DEFAULT = """
#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
environment = []
load-kmods = true
"""


@pytest.fixture
def lab(expect):
    return expect("lab", "lab-node-1")


def test_the_converged_lab_node_passes(lab_facts, lab):
    for check in CHECKS:
        outcome = check(lab_facts, lab)
        assert outcome.status == "pass", f"{check.__name__}: {outcome.message}"
    kernel = node_checks.kernel_module(lab_facts, lab)
    assert kernel.status == "skip" and "gpu_fleet_gpu_count is 0" in kernel.message
    toolkit = node_checks.toolkit_isolation(lab_facts, lab)
    assert toolkit.status == "skip" and "nvidia_container_toolkit_source is none" in toolkit.message
    for name in ("limiter", "dcgm_exporter"):
        assert node_checks.addon_metrics(lab_facts, lab, name).status == "skip"


def test_an_unheld_driver_package_fails_with_the_fix(lab_facts, lab):
    lab_facts["packages"]["installed"]["nvidia-smi"]["selection"] = "install"
    outcome = node_checks.driver_held(lab_facts, lab)
    assert outcome.status == "fail"
    assert outcome.message == "not hold: nvidia-smi (install); run site.yml or `apt-mark hold` them"


def test_the_other_driver_version_fails_naming_both(lab_facts, lab):
    lab_facts["packages"]["installed"]["libnvidia-ml1"]["version"] = "535.261.03-1"
    outcome = node_checks.driver_packages(lab_facts, lab)
    assert outcome.status == "fail"
    assert outcome.message.startswith("libnvidia-ml1 is at 535.261.03-1; the pin (nvidia_driver_package_version")
    assert outcome.message.endswith(lab["nvidia_driver_package_version"])


def test_a_removed_driver_package_fails(lab_facts, lab):
    del lab_facts["packages"]["installed"]["nvidia-alternative"]
    assert "nvidia-alternative is not installed" in node_checks.driver_packages(lab_facts, lab).message


def test_no_hold_wanted_skips_the_hold_check(lab_facts, expect):
    outcome = node_checks.driver_held(lab_facts, expect("lab", "lab-node-1", nvidia_driver_hold=False))
    assert outcome.status == "skip" and "nvidia_driver_hold is false" in outcome.message


def test_a_pin_file_for_another_version_fails(lab_facts, lab):
    pin = lab["nvidia_driver_package_version"]
    lab_facts["files"][APT_PIN] = lab_facts["files"][APT_PIN].replace(pin, "535.261.03-1")
    outcome = node_checks.apt_pin(lab_facts, lab)
    assert outcome.status == "fail" and f"it does not pin version {pin}" in outcome.message


def test_a_missing_or_short_upgrade_blacklist_fails(lab_facts, lab):
    lab_facts["files"][UPGRADE_BLACKLIST] = lab_facts["files"][UPGRADE_BLACKLIST].replace('"libcuda";', "")
    outcome = node_checks.upgrade_blacklist(lab_facts, lab)
    assert outcome.status == "fail" and "lacks libcuda" in outcome.message
    lab_facts["files"][UPGRADE_BLACKLIST] = None
    assert "is missing" in node_checks.upgrade_blacklist(lab_facts, lab).message


def test_cgroup_v1_and_a_missing_controller_fail(lab_facts, lab):
    lab_facts["cgroup"] = {"fs_type": "tmpfs", "controllers": None}
    assert "is tmpfs, not cgroup2" in node_checks.cgroup_unified(lab_facts, lab).message
    lab_facts["cgroup"] = {"fs_type": "cgroup2", "controllers": ["cpuset", "cpu", "memory", "pids"]}
    outcome = node_checks.cgroup_controllers(lab_facts, lab)
    assert outcome.status == "fail" and outcome.message.startswith("controllers io are not available")


def _without_nvidia_runtime(dump: str) -> str:
    """`containerd config dump` with every [...runtimes.nvidia...] table cut out, as the lab break test does."""
    return re.sub(r"(?m)^ *\[[^\]\n]*runtimes\.nvidia[^\]\n]*\]\n(?:(?! *\[).*\n)*", "", dump)


def test_a_config_without_the_nvidia_runtime_fails(lab_facts, lab):
    dump = lab_facts["containerd_config"]
    dump["stdout"] = _without_nvidia_runtime(dump["stdout"])
    outcome = node_checks.containerd_nvidia_runtime(lab_facts, lab)
    assert outcome.status == "fail"
    assert outcome.message == "`containerd config dump` has no nvidia runtime (runtimes: runc); run site.yml"
    systemd = node_checks.containerd_systemd_cgroup(lab_facts, lab)
    assert systemd.status == "fail" and "runtime(s) nvidia" in systemd.message


def test_cgroupfs_driver_and_broken_toml_fail(lab_facts, lab):
    dump = lab_facts["containerd_config"]
    config = dump["stdout"]
    runc_options = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]'
    head, tail = config.split(runc_options)
    dump["stdout"] = head + runc_options + tail.replace("SystemdCgroup = true", "SystemdCgroup = false", 1)
    assert "runtime(s) runc" in node_checks.containerd_systemd_cgroup(lab_facts, lab).message
    dump["stdout"] = config + "\n[plugins\n"
    assert (
        "`containerd config dump` printed no valid TOML"
        in node_checks.containerd_nvidia_runtime(lab_facts, lab).message
    )


def test_a_containerd_that_cannot_read_its_config_fails_with_its_words(lab_facts, lab):
    lab_facts["containerd_config"] = {
        "rc": 1,
        "stdout": "",
        "stderr": f'containerd: failed to load TOML from {CONTAINERD_DROP_IN}: invalid plugin key URI "cri"',
    }
    for check in (node_checks.containerd_nvidia_runtime, node_checks.containerd_default_runtime):
        outcome = check(lab_facts, lab)
        assert outcome.status == "fail"
        assert outcome.message.startswith("`containerd config dump` failed (exit 1): containerd: failed to load TOML")


def test_nvidia_as_the_default_runtime_fails(lab_facts, lab):
    dump = lab_facts["containerd_config"]
    dump["stdout"] = dump["stdout"].replace('default_runtime_name = "runc"', 'default_runtime_name = "nvidia"')
    outcome = node_checks.containerd_default_runtime(lab_facts, lab)
    assert outcome.status == "fail"
    assert outcome.message == (
        "default_runtime_name is 'nvidia' in `containerd config dump`, expected 'runc' "
        "(nvidia_container_toolkit_default_runtime); run site.yml"
    )


def test_containerd_version_3_config_is_read(lab_facts, lab):
    dump = lab_facts["containerd_config"]
    dump["stdout"] = (
        dump["stdout"]
        .replace("version = 2", "version = 3")
        .replace("io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime")
    )
    assert node_checks.containerd_nvidia_runtime(lab_facts, lab).status == "pass"
    assert node_checks.containerd_default_runtime(lab_facts, lab).status == "pass"


def test_the_toolkit_must_refuse_the_variable_to_unprivileged_containers(lab_facts, expect):
    node = expect("lab", "lab-node-1", nvidia_container_toolkit_source="nvidia-repo")
    assert node_checks.toolkit_isolation(lab_facts, node).message == f"{TOOLKIT_CONFIG} is missing; run site.yml"
    lab_facts["files"][TOOLKIT_CONFIG] = TOOLKIT_DEFAULT
    outcome = node_checks.toolkit_isolation(lab_facts, node)
    assert outcome.status == "fail"
    assert outcome.message == (
        f"{TOOLKIT_CONFIG}: accept-nvidia-visible-devices-envvar-when-unprivileged is unset (default true), not false; "
        "accept-nvidia-visible-devices-as-volume-mounts is unset (default false), not true: unprivileged containers "
        "can pick GPUs with NVIDIA_VISIBLE_DEVICES; run site.yml"
    )
    # What the role's lineinfile makes of the package's file.
    lab_facts["files"][TOOLKIT_CONFIG] = TOOLKIT_DEFAULT.replace(
        "#accept-nvidia-visible-devices-as-volume-mounts = false",
        "accept-nvidia-visible-devices-as-volume-mounts = true",
    ).replace(
        "#accept-nvidia-visible-devices-envvar-when-unprivileged = true",
        "accept-nvidia-visible-devices-envvar-when-unprivileged = false",
    )
    assert node_checks.toolkit_isolation(lab_facts, node).status == "pass"
    lab_facts["files"][TOOLKIT_CONFIG] = lab_facts["files"][TOOLKIT_CONFIG].replace(
        "unprivileged = false", "unprivileged = true"
    )
    assert "envvar-when-unprivileged is true, not false" in node_checks.toolkit_isolation(lab_facts, node).message


def test_a_stopped_containerd_fails(lab_facts, lab):
    lab_facts["services"]["containerd"] = "inactive"
    assert (
        node_checks.containerd_running(lab_facts, lab).message
        == "containerd is inactive (systemctl is-active), not active"
    )


def test_the_kernel_module_on_a_gpu_node(lab_facts, expect):
    gpu_node = expect("lab", "lab-node-1", gpu_fleet_gpu_count=8)
    version, kernel = gpu_node["nvidia_driver_version"], lab_facts["kernel"]
    missing = node_checks.kernel_module(lab_facts, gpu_node)
    assert missing.status == "fail"
    assert "modinfo -k 6.1.0-50-cloud-amd64 nvidia: modinfo: ERROR: Module nvidia not found." in missing.message
    assert "dkms status has no nvidia" in missing.message and "dkms: command not found" in missing.message
    lab_facts["modinfo"] = {"rc": 0, "stdout": f"{version}\n", "stderr": ""}
    lab_facts["dkms"] = {
        "rc": 0,
        "stdout": f"nvidia-current-open/{version}, {kernel}, x86_64: installed\n",
        "stderr": "",
    }
    assert node_checks.kernel_module(lab_facts, gpu_node).status == "pass"
    lab_facts["modinfo"]["stdout"] = "535.261.03\n"
    assert "shows version 535.261.03" in node_checks.kernel_module(lab_facts, gpu_node).message


def test_metrics_where_the_addons_run(lab_facts, expect):
    gpu_node = expect("prod", "gpu-p01.prod.example.com")
    lab_facts["metrics"] = {
        "limiter": {"url": None, "error": "no ready pod labelled app.kubernetes.io/name=cgroup-limiter on this node"},
        "dcgm_exporter": {
            "url": "http://10.244.1.7:9400/metrics",
            "error": None,
            "metric_names": ["DCGM_FI_DEV_GPU_TEMP"],
        },
    }
    limiter = node_checks.addon_metrics(lab_facts, gpu_node, "limiter")
    assert limiter.status == "fail" and "no ready pod labelled app.kubernetes.io/name=cgroup-limiter" in limiter.message
    dcgm = node_checks.addon_metrics(lab_facts, gpu_node, "dcgm_exporter")
    assert dcgm.status == "fail" and "lacks DCGM_FI_DEV_GPU_UTIL" in dcgm.message
    lab_facts["metrics"]["dcgm_exporter"]["metric_names"] = list(gpu_node.metrics[1].required_metrics)
    assert node_checks.addon_metrics(lab_facts, gpu_node, "dcgm_exporter").status == "pass"
