"""The stack config: every committed stack file parses, and bad config fails with the file and key."""

import copy
from pathlib import Path

import pytest
import yaml
from gpu_serving.config import ConfigError, from_stack_file
from gpu_serving.serving_layer import drift_agent_objects, gateway_objects

import platform_matrix
from monitoring import alerting

PULUMI_DIR = Path(__file__).resolve().parents[2] / "pulumi"
ENVS = ("dev", "staging", "prod")
INVENTORIES = {"dev": "lab", "staging": "staging", "prod": "prod"}


def stack_document(env: str) -> dict:
    return yaml.safe_load((PULUMI_DIR / f"Pulumi.{env}.yaml").read_text(encoding="utf-8"))


def write_stack(tmp_path: Path, env: str, document: dict) -> Path:
    # The copy keeps the real relative fleetInventory: it is resolved against pulumi/.
    path = tmp_path / f"Pulumi.{env}.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def broken(tmp_path: Path, env: str, key: str, change) -> str:
    document = copy.deepcopy(stack_document(env))
    change(document["config"][f"gpu-serving:{key}"] if key else document["config"])
    with pytest.raises(ConfigError) as info:
        from_stack_file(env, write_stack(tmp_path, env, document))
    return str(info.value)


@pytest.mark.parametrize("env", ENVS)
def test_every_stack_file_parses_with_its_inventory_and_contract(env):
    cfg = from_stack_file(env)
    assert cfg.inventory == INVENTORIES[env]
    assert cfg.fleet.path == PULUMI_DIR.parent / "inventories" / INVENTORIES[env] / "group_vars/gpu_nodes/fleet.yml"
    # The model repository validator reads gpu-serving:triton.gpus as an integer.
    gpus = stack_document(env)["config"]["gpu-serving:triton"]["gpus"]
    assert type(gpus) is int and gpus == cfg.triton.gpus <= cfg.fleet.gpu_count
    assert cfg.triton.image == platform_matrix.load().triton_image(cfg.fleet.triton_release)


def test_prod_is_gpu_and_gitops_and_dev_is_cpu_only_and_direct():
    prod, dev = from_stack_file("prod"), from_stack_file("dev")
    assert prod.delivery == "argocd" and prod.triton.gpus >= 1
    assert prod.triton.node_selector and any(t["key"] == "nvidia.com/gpu" for t in prod.triton.tolerations)
    assert dev.delivery == "pulumi" and dev.triton.gpus == 0


def test_a_negative_replica_count_names_the_key_and_file(tmp_path):
    message = broken(tmp_path, "prod", "triton", lambda t: t["replicas"].update(min=-1))
    assert message == "Pulumi.prod.yaml: gpu-serving:triton.replicas.min: must be an integer >= 1, got -1"


def test_max_replicas_below_min_fails(tmp_path):
    message = broken(tmp_path, "prod", "triton", lambda t: t["replicas"].update(min=4, max=2))
    assert "gpu-serving:triton.replicas.max: must be an integer >= 4, got 2" in message


def test_more_gpus_than_the_node_has_fails_naming_the_inventory(tmp_path):
    message = broken(tmp_path, "prod", "triton", lambda t: t.update(gpus=9))
    assert message.startswith("Pulumi.prod.yaml: gpu-serving:triton.gpus: 9 GPUs per pod, but the nodes have 8")
    assert "inventories/prod/group_vars/gpu_nodes/fleet.yml" in message


def test_gpus_on_the_cpu_only_lab_fail(tmp_path):
    def gpu(triton):
        triton.update(gpus=1, nodeSelector={"nvidia.com/gpu.present": "true"})
        triton["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]

    assert "gpu-serving:triton.gpus: 1 GPUs per pod, but the nodes have 0" in broken(tmp_path, "dev", "triton", gpu)


@pytest.mark.parametrize("weight", [0, 101, "10", True])
def test_a_step_weight_outside_1_to_100_fails(tmp_path, weight):
    message = broken(tmp_path, "staging", "triton", lambda t: t["canary"]["steps"][0].update(setWeight=weight))
    assert f"gpu-serving:triton.canary.steps[0].setWeight: must be an integer between 1 and 100, got {weight!r}" in (
        message
    )


def test_a_triton_release_the_fleets_gpus_cannot_run_fails(tmp_path):
    # A fleet of V100s (compute capability 7.0): Triton 25.04 needs 7.5 or later.
    fleet = tmp_path / "v100/group_vars/gpu_nodes/fleet.yml"
    fleet.parent.mkdir(parents=True)
    staging = yaml.safe_load((PULUMI_DIR.parent / "inventories/staging/group_vars/gpu_nodes/fleet.yml").read_text())
    fleet.write_text(yaml.safe_dump({**staging, "gpu_fleet_gpu_product": "Tesla-V100-SXM2-32GB"}))

    def change(config: dict) -> None:
        config["gpu-serving:fleetInventory"] = str(tmp_path / "v100")
        config["gpu-serving:triton"]["release"] = "25.04"

    message = broken(tmp_path, "staging", "", change)
    assert message.startswith("Pulumi.staging.yaml: gpu-serving:triton.release: Triton 25.04 cannot run")
    assert "Triton 25.04 needs compute capability 7.5" in message


@pytest.mark.parametrize("field", ["weight", "replicas", "release", "modelRepository"])
def test_a_field_of_the_static_split_says_where_its_job_went(tmp_path, field):
    message = broken(tmp_path, "staging", "triton", lambda t: t["canary"].update({field: 5}))
    assert message.startswith(f"Pulumi.staging.yaml: gpu-serving:triton.canary.{field}: ")
    assert "Rollout" in message or "pod template" in message


def test_an_unknown_release_lists_the_known_ones(tmp_path):
    message = broken(tmp_path, "prod", "triton", lambda t: t.update(release="99.01"))
    assert "Triton '99.01' is not in the platform matrix (known: 23.09, 24.05, 24.10, 25.04)" in message


def test_gpu_pods_need_a_gpu_toleration(tmp_path):
    message = broken(tmp_path, "prod", "triton", lambda t: t.update(tolerations=[]))
    assert "gpu-serving:triton.tolerations: GPU pods need a toleration for the nvidia.com/gpu taint" in message


def test_gpu_pods_need_a_node_selector(tmp_path):
    message = broken(tmp_path, "prod", "triton", lambda t: t.pop("nodeSelector"))
    assert "gpu-serving:triton.nodeSelector: GPU pods need a node selector" in message


def test_a_request_above_its_limit_fails(tmp_path):
    message = broken(tmp_path, "prod", "triton", lambda t: t["resources"]["requests"].update(memory="80Gi"))
    assert "gpu-serving:triton.resources.requests.memory: the memory request 80Gi is above the limit 64Gi" in message


def test_a_malformed_quantity_fails(tmp_path):
    message = broken(tmp_path, "prod", "monitoring", lambda m: m["grafanaResources"]["limits"].update(cpu="lots"))
    assert "gpu-serving:monitoring.grafanaResources.cpu: 'lots' is not a Kubernetes quantity" in message


def test_a_missing_key_is_reported(tmp_path):
    message = broken(tmp_path, "prod", "", lambda c: c.pop("gpu-serving:gitRepoURL"))
    assert message == "Pulumi.prod.yaml: gpu-serving:gitRepoURL: is required"


def test_a_model_repository_must_be_a_cloud_url(tmp_path):
    message = broken(tmp_path, "prod", "triton", lambda t: t.update(modelRepository="/models"))
    assert "gpu-serving:triton.modelRepository: '/models' does not match" in message


def test_a_missing_inventory_names_the_fleet_file(tmp_path):
    message = broken(tmp_path, "prod", "", lambda c: c.update({"gpu-serving:fleetInventory": "../inventories/nope"}))
    assert "gpu-serving:fleetInventory:" in message and "inventories/nope/group_vars/gpu_nodes/fleet.yml" in message


def test_a_plaintext_secret_in_the_stack_file_is_refused(tmp_path):
    message = broken(tmp_path, "prod", "", lambda c: c.update({"gpu-serving:grafanaAdminPassword": "hunter2"}))
    assert "gpu-serving:grafanaAdminPassword: is a plaintext value; set it with `pulumi config set --secret" in message


def test_an_encrypted_secret_in_the_stack_file_is_accepted(tmp_path):
    document = stack_document("prod")
    document["config"]["gpu-serving:grafanaAdminPassword"] = {"secure": "v1:abc"}
    assert from_stack_file("prod", write_stack(tmp_path, "prod", document)).env == "prod"


def test_the_project_is_gpu_serving_on_python_with_a_pip_virtualenv():
    project = yaml.safe_load((PULUMI_DIR / "Pulumi.yaml").read_text(encoding="utf-8"))
    assert project["name"] == "gpu-serving"
    assert project["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": ".venv"}}
    assert (PULUMI_DIR / "requirements.txt").is_file()


def test_a_misspelt_key_is_refused_not_ignored(tmp_path):
    message = broken(tmp_path, "prod", "triton", lambda t: t["canary"].update(stpes=[]))
    assert message == "Pulumi.prod.yaml: gpu-serving:triton.canary.stpes: unknown field (known: steps)"
    message = broken(tmp_path, "prod", "", lambda c: c.update({"gpu-serving:trition": {}}))
    assert message.startswith("Pulumi.prod.yaml: gpu-serving:trition: unknown field (known: fleetInventory,")


DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("key", "change", "expected"),
    [
        (
            "gateway",
            lambda g: g["image"].update(tag="latest"),
            "gpu-serving:gateway.image.tag: `latest` is not a pin: name a release tag or a digest",
        ),
        (
            "driftAgent",
            lambda d: d["image"].pop("tag"),
            "gpu-serving:driftAgent.image: pin the image with a tag or a digest (sha256:...)",
        ),
        (
            "gateway",
            lambda g: g["image"].update(repository="ghcr.io/gpu-serving/drift-agent"),
            "gpu-serving:gateway.image.repository: must be <registry>/gpu-serving/gateway, got",
        ),
        (
            "driftAgent",
            lambda d: d["image"].update(digest="sha256:abc"),
            "gpu-serving:driftAgent.image.digest: 'sha256:abc' does not match",
        ),
        (
            "gateway",
            lambda g: g.update(cpuTargetPercent=150),
            "gpu-serving:gateway.cpuTargetPercent: must be an integer between 10 and 100, got 150",
        ),
        (
            "gateway",
            lambda g: g["replicas"].update(min=4, max=3),
            "gpu-serving:gateway.replicas.max: must be an integer >= 4, got 3",
        ),
        (
            "gateway",
            lambda g: g["resources"]["requests"].update(cpu="4"),
            "gpu-serving:gateway.resources.requests.cpu: the cpu request 4 is above the limit 2",
        ),
        (
            "driftAgent",
            lambda d: d.update(replicas=2),
            "gpu-serving:driftAgent.replicas: unknown field (known: image, resources)",
        ),
    ],
    ids=["latest", "unpinned", "wrong-image", "bad-digest", "cpu-target", "replicas", "request-above-limit", "unknown"],
)
def test_bad_gateway_and_drift_agent_config_names_the_file_and_key(tmp_path, key, change, expected):
    message = broken(tmp_path, "prod", key, change)
    assert message.startswith("Pulumi.prod.yaml: ") and expected in message


def test_the_gateway_and_drift_agent_are_required(tmp_path):
    message = broken(tmp_path, "staging", "", lambda c: c.pop("gpu-serving:driftAgent"))
    assert message == "Pulumi.staging.yaml: gpu-serving:driftAgent: is required"


def test_a_digest_pins_the_image_and_drops_the_digest_waiver(tmp_path):
    document = copy.deepcopy(stack_document("prod"))
    document["config"]["gpu-serving:gateway"]["image"]["digest"] = DIGEST
    document["config"]["gpu-serving:driftAgent"]["image"] = {
        "repository": "registry.example.com:5000/gpu-serving/drift-agent",
        "digest": DIGEST,
    }
    cfg = from_stack_file("prod", write_stack(tmp_path, "prod", document))
    assert cfg.gateway.image.ref == f"ghcr.io/gpu-serving/gateway:0.1.0@{DIGEST}"
    assert cfg.drift_agent.image.ref == f"registry.example.com:5000/gpu-serving/drift-agent@{DIGEST}"
    for obj in [*gateway_objects(cfg), *drift_agent_objects(cfg)]:
        if obj["kind"] == "Deployment":
            assert "annotations" not in obj["metadata"], obj["metadata"]["name"]
    unpinned = [o for o in gateway_objects(from_stack_file("prod")) if o["kind"] == "Deployment"]
    assert unpinned[0]["metadata"]["annotations"]["checkov.io/skip1"].startswith("CKV_K8S_43=no digest")


@pytest.mark.parametrize("env", ENVS)
def test_each_alerts_runbook_is_the_runbook_of_the_repository_and_revision_the_environment_deploys(env):
    cfg = from_stack_file(env)
    repository = cfg.git_repo_url.removesuffix(".git")
    assert cfg.monitoring.runbook_url == f"{repository}/blob/{cfg.git_revision}/monitoring/runbook.md"


def test_a_runbook_url_set_in_the_stack_is_used_as_it_is(tmp_path):
    document = copy.deepcopy(stack_document("staging"))
    document["config"]["gpu-serving:monitoring"]["runbookURL"] = "https://wiki.example.com/gpu-serving/runbook"
    document["config"]["gpu-serving:gitRevision"] = "release-7"
    cfg = from_stack_file("staging", write_stack(tmp_path, "staging", document))
    assert cfg.monitoring.runbook_url == "https://wiki.example.com/gpu-serving/runbook"


def test_an_ssh_remote_without_a_runbook_url_names_the_key(tmp_path):
    message = broken(
        tmp_path, "prod", "", lambda c: c.update({"gpu-serving:gitRepoURL": "git@git.example.com:p/r.git"})
    )
    assert message == (
        "Pulumi.prod.yaml: gpu-serving:monitoring.runbookURL: "
        "gitRepoURL is not an https URL: set the runbook's web address"
    )


def test_a_route_to_an_unknown_receiver_fails_naming_the_alerting_file_and_key(tmp_path, monkeypatch):
    config = yaml.safe_load(alerting.SOURCE.read_text(encoding="utf-8"))
    config["route"]["routes"][1]["receiver"] = "pager"
    source = tmp_path / "alertmanager.yml"
    source.write_text(yaml.safe_dump(config), encoding="utf-8")
    monkeypatch.setattr(alerting, "SOURCE", source)
    with pytest.raises(ConfigError) as info:
        from_stack_file("prod")
    assert str(info.value) == (
        "monitoring/alertmanager.yml: route.routes[1].receiver: 'pager' is not a receiver"
        " (page, ticket, heartbeat, null)"
    )
