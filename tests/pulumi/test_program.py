"""pulumi/__main__.py under mocks, once per stack: what each delivery registers, and bad
config or a missing secret failing before any resource is registered."""

import json

import pytest
from gpu_serving.config import ConfigError, from_stack_file
from gpu_serving.render import render

import platform_matrix
from monitoring import alerting
from tests.pulumi.pulumi_mocks import RECEIVER_URLS, RecordingMocks, run_program, stack_config, unwrap_secret

CHART = "kubernetes:helm.sh/v4:Chart"
APPLICATION = "kubernetes:argoproj.io/v1alpha1:Application"


def test_dev_installs_every_component_directly():
    mocks = run_program("dev")
    components = {r.typ.rsplit(":", 1)[1] for r in mocks.resources if r.typ.startswith("gpu-serving:")}
    assert components == {
        "Istio",
        "Monitoring",
        "GrafanaAdmin",
        "AlertReceivers",
        "ArgoRollouts",
        "Triton",
        "Gateway",
        "ArgoCD",
    }
    charts = {(r.inputs["chart"], r.inputs["version"]) for r in mocks.of_type(CHART)}
    matrix = platform_matrix.load()
    assert charts == {(pin.get("chart", name), pin["version"]) for name, pin in matrix.data["charts"].items()}
    # Argo CD syncs only the add-ons of the lab inventory; Pulumi owns the serving objects.
    (app,) = mocks.of_type(APPLICATION)
    assert app.inputs["spec"]["source"]["path"] == "deploy/addons/lab"
    for group in ("triton-objects", "gateway-objects", "gateway-drift-agent", "istio-gateway-routing"):
        assert mocks.one("kubernetes:yaml/v2:ConfigGroup", group)


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_gitops_stacks_install_argo_cd_its_projects_and_the_app_of_apps_only(env):
    mocks = run_program(env)
    assert [r.name for r in mocks.of_type(CHART)] == ["argo-cd"]
    assert not mocks.of_type("kubernetes:yaml/v2:ConfigGroup")
    (root,) = mocks.of_type(APPLICATION)
    spec = root.inputs["spec"]
    assert root.name == "gpu-serving-root"
    assert spec["source"]["path"] == f"deploy/serving/{env}/apps"
    assert spec["source"]["repoURL"] == "https://git.example.com/platform/gpu-serving-iac.git"
    assert spec["syncPolicy"]["automated"] == {"prune": True, "selfHeal": True}
    projects = {r.name for r in mocks.of_type("kubernetes:argoproj.io/v1alpha1:AppProject")}
    assert projects == {"gpu-bootstrap", "gpu-platform", "gpu-addons", "gpu-serving"}
    assert spec["project"] == "gpu-bootstrap"


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_the_grafana_password_reaches_the_cluster_only_as_a_secret(env):
    mocks = run_program(env, password="pa55-" + env)
    secret = mocks.one("kubernetes:core/v1:Secret", "grafana-admin")
    assert secret.inputs["metadata"] == {"name": "grafana-admin", "namespace": "monitoring"}
    assert unwrap_secret(secret.inputs["stringData"])["admin-password"] == f"pa55-{env}"
    for chart in mocks.of_type(CHART):
        assert f"pa55-{env}" not in repr(chart.inputs)
    for chart in mocks.of_type(CHART):
        if chart.name == "kube-prometheus-stack":
            assert chart.inputs["values"]["grafana"]["admin"]["existingSecret"] == "grafana-admin"


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_the_receivers_urls_reach_the_cluster_only_as_a_secret_that_alertmanager_mounts(env):
    urls = {key: f"https://hooks.example.test/{env}/{key}/t0ken" for key in RECEIVER_URLS}
    mocks = run_program(env, receivers=urls)
    secret = mocks.one("kubernetes:core/v1:Secret", alerting.RECEIVERS_SECRET)
    assert secret.inputs["metadata"] == {"name": alerting.RECEIVERS_SECRET, "namespace": "monitoring"}
    assert unwrap_secret(secret.inputs["stringData"]) == urls
    everything_else = [r.inputs for r in mocks.resources if r is not secret]
    assert "t0ken" not in repr(everything_else)
    # Whoever installs the chart (Pulumi in dev, Argo CD from git elsewhere) mounts that Secret.
    rendered = render(from_stack_file(env))["apps/kube-prometheus-stack.yaml"]
    assert f"- {alerting.RECEIVERS_SECRET}\n" in rendered and "t0ken" not in rendered


def test_a_missing_receiver_url_fails_before_any_resource_naming_the_secret_to_set():
    mocks = RecordingMocks()
    urls = dict(RECEIVER_URLS)
    del urls["heartbeat"]
    with pytest.raises(ConfigError) as info:
        run_program("prod", receivers=urls, mocks=mocks)
    assert mocks.resources == []
    assert str(info.value) == (
        "Pulumi.prod.yaml: gpu-serving:alertReceiverHeartbeat: is missing: "
        "set it with `pulumi config set --secret alertReceiverHeartbeat -s prod`"
    )


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_a_missing_secret_fails_before_any_resource(env):
    mocks = RecordingMocks()
    with pytest.raises(ConfigError) as info:
        run_program(env, password=None, mocks=mocks)
    assert mocks.resources == []
    assert str(info.value) == (
        f"Pulumi.{env}.yaml: gpu-serving:grafanaAdminPassword: is missing: "
        f"set it with `pulumi config set --secret grafanaAdminPassword -s {env}`"
    )


def test_a_plaintext_secret_fails_before_any_resource():
    with pytest.raises(ConfigError, match="grafanaAdminPassword: is a plaintext value"):
        run_program("prod", secret=False)


def triton_with(env: str, change) -> dict:
    triton = json.loads(stack_config(env)["gpu-serving:triton"])
    change(triton)
    return {"triton": triton}


@pytest.mark.parametrize(
    ("env", "change", "expected"),
    [
        ("prod", lambda t: t["replicas"].update(min=-2), "gpu-serving:triton.replicas.min: must be an integer >= 1"),
        ("prod", lambda t: t.update(gpus=16), "gpu-serving:triton.gpus: 16 GPUs per pod, but the nodes have 8"),
        (
            "staging",
            lambda t: t["canary"]["steps"].pop(1),
            "gpu-serving:triton.canary.steps[1]: setWeight 50 follows setWeight 5 (steps[0]) with no analysis",
        ),
        ("dev", lambda t: t.update(release="99.01"), "gpu-serving:triton.release: Triton '99.01' is not in the"),
    ],
    ids=["negative-replicas", "gpus-above-node", "step-without-analysis", "release-not-in-matrix"],
)
def test_bad_config_fails_the_program_before_any_resource(env, change, expected):
    mocks = RecordingMocks()
    with pytest.raises(ConfigError) as info:
        run_program(env, triton_with(env, change), mocks=mocks)
    assert str(info.value).startswith(f"Pulumi.{env}.yaml: ") and expected in str(info.value)
    assert mocks.resources == []
