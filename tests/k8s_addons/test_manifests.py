"""What the rendered manifests of every inventory must hold."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest
import yaml

import platform_matrix
from monitoring.rules import DCGM_COUNT_WINDOW_MINUTES
from tests.k8s_addons.addon_render import (
    ENVIRONMENTS,
    REPO_ROOT,
    VENV_BIN,
    ansible_env,
    containers,
    find,
    objects,
    workloads,
)
from tests.k8s_addons.addon_schema import crd_errors, is_crd_kind, kubernetes_errors

MATRIX = platform_matrix.load()
IMAGE_OF_WORKLOAD = {
    "nvidia-device-plugin": "device_plugin",
    "dcgm-exporter": "dcgm_exporter",
    "cgroup-limiter": "io_limiter",
}
REQUIRED_COUNTERS = {
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
}


def inventory_hosts(env: str, group: str) -> list[str]:
    """The hosts of `group` as Ansible expands them (host patterns such as gpu-p[01:04])."""
    command = [str(VENV_BIN / "ansible-inventory"), "-i", str(REPO_ROOT / "inventories" / env), "--list"]
    listing = subprocess.run(command, env=ansible_env(), capture_output=True, text=True, check=True)
    return sorted(json.loads(listing.stdout)[group]["hosts"])


def fleet(env: str) -> dict:
    return yaml.safe_load((REPO_ROOT / "inventories" / env / "group_vars/gpu_nodes/fleet.yml").read_text())


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_builtin_kinds_pass_kubernetes_validate_strict(rendered, env):
    checked = 0
    for obj in objects(rendered[env]):
        if is_crd_kind(obj):
            continue
        errors = kubernetes_errors(obj, MATRIX.kubernetes_version)
        assert not errors, f"{env}: {obj['kind']}/{obj['metadata']['name']}: {errors}"
        checked += 1
    assert checked >= 15


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_service_monitors_match_the_prometheus_operator_crd(rendered, env):
    monitors = [obj for obj in objects(rendered[env]) if obj["kind"] == "ServiceMonitor"]
    assert {m["metadata"]["name"] for m in monitors} == {"dcgm-exporter", "cgroup-limiter"}
    for monitor in monitors:
        assert crd_errors(monitor) == [], monitor["metadata"]["name"]


def test_kubernetes_check_rejects_unknown_fields(rendered):
    daemonset = find(rendered["prod"], "DaemonSet", "dcgm-exporter")
    typo = {**daemonset, "spec": {**daemonset["spec"], "updateStrategi": {}}}
    assert kubernetes_errors(typo, MATRIX.kubernetes_version)


def test_crd_check_rejects_unknown_and_mistyped_fields(rendered):
    monitor = find(rendered["prod"], "ServiceMonitor", "dcgm-exporter")
    typo = {**monitor, "spec": {**monitor["spec"], "endpoints": [{"port": "metrics", "intervall": "30s"}]}}
    assert crd_errors(typo) == ["spec.endpoints[0].intervall: unknown field"]
    mistyped = {**monitor, "spec": {**monitor["spec"], "endpoints": [{"port": 9400}]}}
    assert crd_errors(mistyped) and "spec.endpoints.0.port" in crd_errors(mistyped)[0]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_add_on_lands_only_on_gpu_nodes_and_tolerates_their_taint(rendered, env):
    found = {w["metadata"]["name"] for w in workloads(rendered[env])}
    assert found == set(IMAGE_OF_WORKLOAD)
    for workload in workloads(rendered[env]):
        pod = workload["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}, workload["metadata"]["name"]
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        assert pod["priorityClassName"] == "system-node-critical"


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_container_has_cpu_and_memory_requests_and_limits(rendered, env):
    for workload in workloads(rendered[env]):
        for container in containers(workload):
            for kind in ("requests", "limits"):
                assert set(container["resources"][kind]) == {"cpu", "memory"}, (workload["metadata"]["name"], kind)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_images_are_the_matrix_pins(rendered, env):
    for workload in workloads(rendered[env]):
        expected = MATRIX.image(IMAGE_OF_WORKLOAD[workload["metadata"]["name"]])
        assert {c["image"] for c in containers(workload)} == {expected}


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_gpu_nodes_get_labels_and_taint_from_the_inventory(rendered, env):
    nodes = [obj for obj in objects(rendered[env]) if obj["kind"] == "Node"]
    facts = fleet(env)
    assert sorted(node["metadata"]["name"] for node in nodes) == inventory_hosts(env, "gpu_nodes")
    for node in nodes:
        labels = node["metadata"]["labels"]
        assert labels["nvidia.com/gpu.present"] == "true"
        assert labels["nvidia.com/gpu.product"] == facts["gpu_fleet_gpu_product"]
        assert labels["nvidia.com/gpu.count"] == str(facts["gpu_fleet_gpu_count"])
        assert labels["gpu.example.com/pool"] == facts["gpu_fleet_pools"][0]
        assert {f"pool.gpu.example.com/{pool}" for pool in facts["gpu_fleet_pools"]} <= set(labels)
        assert {"key": "nvidia.com/gpu", "effect": "NoSchedule"} in node["spec"]["taints"]
        # Argo CD patches a Node, and neither prunes it nor deletes it with the Application.
        options = node["metadata"]["annotations"]["argocd.argoproj.io/sync-options"].split(",")
        assert {"ServerSideApply=true", "Prune=false", "Delete=false"} <= set(options), node["metadata"]["name"]


def test_staging_nodes_select_their_time_sliced_config(rendered):
    for node in (obj for obj in objects(rendered["staging"]) if obj["kind"] == "Node"):
        assert node["metadata"]["labels"]["nvidia.com/device-plugin.config"] == "time-sliced"
    configs = find(rendered["staging"], "ConfigMap", "nvidia-device-plugin-configs")["data"]
    sliced = yaml.safe_load(configs["time-sliced"])
    assert sliced["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]


def test_lab_nodes_without_gpus_get_no_gpu_labels(rendered):
    assert fleet("lab")["gpu_fleet_gpu_count"] == 0
    assert not [obj for obj in objects(rendered["lab"]) if obj["kind"] == "Node"]
    assert "40-nodes.yaml" not in rendered["lab"]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_dcgm_exporter_exports_the_required_counters_on_port_9400(rendered, env):
    manifests = rendered[env]
    counters_csv = find(manifests, "ConfigMap", "dcgm-exporter-counters")["data"]["counters.csv"]
    rows = [row for row in csv.reader(io.StringIO(counters_csv)) if row and not row[0].startswith("#")]
    fields = {row[0].strip() for row in rows}
    assert fields >= REQUIRED_COUNTERS
    assert all(row[1].strip() in {"gauge", "counter", "label"} for row in rows)
    # The driver version is a label on every metric, which GpuDriverVersionDrift compares with the pin.
    assert [row[0].strip() for row in rows if row[1].strip() == "label"] == ["DCGM_FI_DRIVER_VERSION"]
    daemonset = find(manifests, "DaemonSet", "dcgm-exporter")
    (exporter,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert exporter["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    env_vars = {e["name"]: e.get("value") for e in exporter["env"]}
    assert env_vars["DCGM_EXPORTER_COLLECTORS"] == "/etc/dcgm-exporter/counters.csv"
    service = find(manifests, "Service", "dcgm-exporter")
    assert service["spec"]["ports"][0]["port"] == 9400
    assert service["spec"]["selector"] == daemonset["spec"]["selector"]["matchLabels"]
    monitor = find(manifests, "ServiceMonitor", "dcgm-exporter")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


EXPORTER_FIELDS = REPO_ROOT / "tests/monitoring/fixtures/dcgm-exporter-3.3.9-3.6.1-fields.txt"
EXPORTER_TYPES = {"gauge", "counter", "histogram", "summary", "label"}  # its parser's promMetricType


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_dcgm_counter_is_one_the_pinned_exporter_accepts(rendered, env):
    """The pinned exporter's parser rules (pkg/dcgmexporter/parser.go), as read there: three
    fields per row, a name from the field list of the exporter's own go-dcgm, a known type; any
    other row stops the exporter at start. The field list is the fixture's, written for that tag."""
    tag = MATRIX.data["images"]["dcgm_exporter"]["tag"]
    assert tag.startswith("3.3.9-3.6.1-"), f"matrix moved dcgm-exporter to {tag}: regenerate {EXPORTER_FIELDS.name}"
    lines = EXPORTER_FIELDS.read_text().splitlines()
    accepted = {line for line in lines if line and not line.startswith("#")}
    counters_csv = find(rendered[env], "ConfigMap", "dcgm-exporter-counters")["data"]["counters.csv"]
    rows = [row for row in csv.reader(io.StringIO(counters_csv)) if row and not row[0].startswith("#")]
    assert [row for row in rows if len(row) != 3] == [], "a help text with a comma splits its row"
    assert {row[0].strip() for row in rows} - accepted == set()
    assert {row[1].strip() for row in rows} <= EXPORTER_TYPES


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_exporter_counts_xids_over_the_window_the_alerts_name(rendered, env):
    (exporter,) = find(rendered[env], "DaemonSet", "dcgm-exporter")["spec"]["template"]["spec"]["containers"]
    env_vars = {e["name"]: e.get("value") for e in exporter["env"]}
    window_ms = str(DCGM_COUNT_WINDOW_MINUTES * 60_000)
    assert env_vars["DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE"] == window_ms
    assert env_vars["DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE"] == window_ms


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_limiter_follows_the_agent_contract(rendered, env):
    manifests = rendered[env]
    daemonset = find(manifests, "DaemonSet", "cgroup-limiter")
    pod = daemonset["spec"]["template"]["spec"]
    (agent,) = pod["containers"]
    assert agent["command"] == ["python", "-m", "cgroup_limiter", "--config", "/etc/cgroup-limiter/config.yaml"]
    node_name = next(e for e in agent["env"] if e["name"] == "NODE_NAME")
    assert node_name["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert agent["ports"][0]["containerPort"] == 9500
    assert agent["livenessProbe"]["httpGet"]["path"] == "/healthz"
    cgroup = next(v for v in pod["volumes"] if "hostPath" in v)
    assert cgroup["hostPath"]["path"] == "/sys/fs/cgroup"
    assert pod["serviceAccountName"] == "cgroup-limiter"
    role = find(manifests, "ClusterRole", "gpu-addons-cgroup-limiter")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    binding = find(manifests, "ClusterRoleBinding", "gpu-addons-cgroup-limiter")
    assert binding["subjects"][0]["name"] == "cgroup-limiter"
    assert find(manifests, "ServiceMonitor", "cgroup-limiter")["spec"]["endpoints"][0]["path"] == "/metrics"


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_limiter_config_is_accepted_by_the_limiter_itself(rendered, env):
    sys.path.insert(0, str(REPO_ROOT / "limiter"))
    try:
        from cgroup_limiter.config import parse_config
    finally:
        sys.path.remove(str(REPO_ROOT / "limiter"))
    text = find(rendered[env], "ConfigMap", "cgroup-limiter-config")["data"]["config.yaml"]
    config = parse_config(yaml.safe_load(text), "config.yaml")
    assert config.metrics_port == 9500
