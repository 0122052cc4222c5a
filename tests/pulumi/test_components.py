"""Each component under mocks: the inputs it registers carry the behaviour the issue asks for."""

import pytest
from gpu_serving.components import ArgoCD, Istio, Monitoring, Triton
from gpu_serving.config import Secrets, from_stack_file
from gpu_serving.gitops import child_applications

import platform_matrix
import pulumi
from monitoring import alerting, dashboards, rules
from monitoring.spec import with_runbook
from tests.pulumi.pulumi_mocks import RECEIVER_URLS, RecordingMocks, run_mocked, unwrap_secret

CHART = "kubernetes:helm.sh/v4:Chart"
GROUP = "kubernetes:yaml/v2:ConfigGroup"
MATRIX = platform_matrix.load()


def register(env: str, build) -> RecordingMocks:
    cfg = from_stack_file(env)
    return run_mocked(env, lambda: build(cfg), {}, [])


def objects(mocks: RecordingMocks, group: str) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in mocks.one(GROUP, group).inputs["objs"]}


def registered_urns() -> list[str]:
    """The URNs the mock monitor handed out; a child's URN carries its parent's type (mocks: only the
    immediate parent's)."""
    return list(pulumi.runtime.settings.SETTINGS.monitor.resources)


def triton(env: str) -> dict[tuple[str, str], dict]:
    return objects(register(env, lambda cfg: Triton("triton", cfg)), "triton-objects")


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_triton_gpu_pods_have_gpu_limits_selector_tolerations_and_sane_resources(env):
    cfg = from_stack_file(env)
    pod = triton(env)["Rollout", "triton"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == str(cfg.triton.gpus)
    assert pod["nodeSelector"]["nvidia.com/gpu.present"] == "true"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert container["resources"]["requests"] == dict(cfg.triton.resources.requests)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_triton_objects_are_children_of_the_component():
    triton("prod")
    assert any(
        u.endswith("gpu-serving:serving:Triton$kubernetes:yaml/v2:ConfigGroup::triton-objects")
        for u in registered_urns()
    )


def test_dev_triton_is_cpu_only_without_gpu_placement():
    pod = triton("dev")["Rollout", "triton"]["spec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"]["limits"]
    assert pod["nodeSelector"] == {} and pod["tolerations"] == []


def test_triton_runs_the_matrix_image_with_the_serving_flags():
    objs = triton("prod")
    container = objs["Rollout", "triton"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == MATRIX.triton_image("24.05") == "nvcr.io/nvidia/tritonserver:24.05-py3"
    args = container["args"]
    for flag in ("--model-control-mode=explicit", "--strict-readiness=true", "--exit-on-error=true"):
        assert flag in args
    assert "--metrics-port=8002" in args and "--model-repository=s3://gpu-serving-models/prod" in args
    assert {"name": "metrics", "containerPort": 8002, "protocol": "TCP"} in container["ports"]


def test_dev_uses_model_control_mode_none_without_load_model():
    args = triton("dev")["Rollout", "triton"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--model-control-mode=none" in args and not any(a.startswith("--load-model") for a in args)


def test_triton_probes_are_separate_and_the_startup_probe_covers_the_model_load_budget():
    container = triton("prod")["Rollout", "triton"]["spec"]["template"]["spec"]["containers"][0]
    startup, live, ready = (container[p] for p in ("startupProbe", "livenessProbe", "readinessProbe"))
    assert live["httpGet"]["path"] == "/v2/health/live" and ready["httpGet"]["path"] == "/v2/health/ready"
    assert (
        startup["periodSeconds"] * startup["failureThreshold"] >= from_stack_file("prod").triton.startup_budget_seconds
    )
    assert live["failureThreshold"] * live["periodSeconds"] < startup["failureThreshold"] * startup["periodSeconds"]


def test_triton_service_ports_are_named_for_istio_with_app_protocols():
    ports = {p["name"]: p for p in triton("prod")["Service", "triton"]["spec"]["ports"]}
    assert ports["http-infer"]["appProtocol"] == "http" and ports["http-infer"]["port"] == 8000
    assert ports["grpc-infer"]["appProtocol"] == "grpc" and ports["grpc-infer"]["port"] == 8001
    assert ports["http-metrics"]["targetPort"] == "metrics"


def test_the_hpa_scales_the_rollout_on_queue_time_and_owns_its_replicas():
    objs = triton("prod")
    cfg = from_stack_file("prod")
    hpa = objs["HorizontalPodAutoscaler", "triton"]["spec"]
    (metric,) = hpa["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == "triton_queue_duration_us_per_request"
    assert metric["pods"]["target"]["averageValue"] == str(cfg.triton.queue_time_target_us)
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (cfg.triton.min_replicas, cfg.triton.max_replicas)
    assert hpa["scaleTargetRef"] == {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "name": "triton"}
    assert "replicas" not in objs["Rollout", "triton"]["spec"]


def test_triton_has_a_pdb_and_a_service_monitor_on_the_metrics_port():
    objs = triton("prod")
    assert objs["PodDisruptionBudget", "triton"]["spec"]["maxUnavailable"] == 1
    monitor = objs["ServiceMonitor", "triton"]["spec"]
    assert monitor["endpoints"][0]["port"] == "http-metrics"
    assert monitor["selector"]["matchLabels"] == objs["Service", "triton"]["metadata"]["labels"]


def test_no_deployment_of_triton_is_left_beside_the_rollout():
    kinds = {kind for kind, name in triton("prod") if name.startswith("triton")}
    assert "Deployment" not in kinds and "Rollout" in kinds


def test_monitoring_installs_the_pinned_chart_with_sidecar_retention_and_selectors():
    cfg = from_stack_file("prod")

    def secrets() -> Secrets:  # Outputs belong to the mocked run's event loop: made inside it
        return Secrets(
            pulumi.Output.secret("pw"), {key: pulumi.Output.secret(url) for key, url in RECEIVER_URLS.items()}
        )

    mocks = register("prod", lambda cfg: Monitoring("monitoring", cfg, secrets()))
    chart = mocks.one(CHART, "kube-prometheus-stack").inputs
    assert chart["version"] == MATRIX.chart("kube-prometheus-stack")["version"]
    assert chart["repositoryOpts"]["repo"] == MATRIX.chart("kube-prometheus-stack")["repository"]
    spec = chart["values"]["prometheus"]["prometheusSpec"]
    assert spec["retention"] == "30d" and spec["resources"]["limits"] == dict(
        cfg.monitoring.prometheus_resources.limits
    )
    assert spec["serviceMonitorSelectorNilUsesHelmValues"] is False and spec["serviceMonitorSelector"] == {}
    assert spec["serviceMonitorNamespaceSelector"] == {}
    sidecar = chart["values"]["grafana"]["sidecar"]["dashboards"]
    assert (sidecar["enabled"], sidecar["label"], sidecar["labelValue"]) == (True, "grafana_dashboard", "1")
    assert spec["ruleSelectorNilUsesHelmValues"] is False and spec["externalLabels"] == {"cluster": "prod"}
    served = objects(mocks, "monitoring-dashboards")
    for stem in dashboards.dashboards():
        assert served["ConfigMap", f"{stem}-dashboard"]["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert served["PrometheusRule", "gpu-serving"]["spec"] == with_runbook(
        {"groups": rules.groups()}, cfg.monitoring.runbook_url
    )
    # monitoring/alertmanager.yml as it is, its URLs from the Secret the chart's Alertmanager mounts.
    alertmanager = chart["values"]["alertmanager"]
    assert alertmanager["config"] == alerting.load()
    assert alertmanager["alertmanagerSpec"]["secrets"] == [alerting.RECEIVERS_SECRET]
    assert chart["values"]["defaultRules"]["disabled"] == {"Watchdog": True}
    receivers = mocks.one("kubernetes:core/v1:Secret", alerting.RECEIVERS_SECRET).inputs
    assert receivers["metadata"] == {"name": alerting.RECEIVERS_SECRET, "namespace": "monitoring"}
    assert unwrap_secret(receivers["stringData"]) == RECEIVER_URLS
    assert "t0ken" not in repr(chart)
    adapter = mocks.one(CHART, "prometheus-adapter").inputs
    (custom,) = adapter["values"]["rules"]["custom"]
    assert custom["name"] == {"matches": f"^{rules.POD_QUEUE_TIME}$", "as": "triton_queue_duration_us_per_request"}
    assert custom["seriesQuery"].startswith(rules.POD_QUEUE_TIME + "{") and "clamp_min" not in custom["metricsQuery"]
    assert adapter["values"]["prometheus"]["url"] == "http://kps-prometheus.monitoring.svc"
    urns = registered_urns()
    assert any(
        u.endswith("gpu-serving:serving:Monitoring$kubernetes:helm.sh/v4:Chart::prometheus-adapter") for u in urns
    )
    assert any(u.endswith("Monitoring$gpu-serving:serving:GrafanaAdmin::monitoring-grafana-admin") for u in urns)
    assert any(u.endswith("serving:GrafanaAdmin$kubernetes:core/v1:Secret::grafana-admin") for u in urns)


@pytest.mark.parametrize("env", ["prod", "staging", "dev"])
def test_istio_charts_strict_mtls_and_the_route_the_rollout_weighs(env):
    def build(cfg):
        istio = Istio("istio", cfg)
        istio.route(cfg, Triton("triton", cfg))

    mocks = register(env, build)
    for name, pin in (("istio-base", "istio-base"), ("istiod", "istiod"), ("istio-ingressgateway", "istio-gateway")):
        assert mocks.one(CHART, name).inputs["version"] == MATRIX.chart(pin)["version"]
        assert mocks.one(CHART, name).inputs["namespace"] == "istio-system"
    mesh = objects(mocks, "istio-mesh")["PeerAuthentication", "default"]
    assert mesh["metadata"]["namespace"] == "istio-system" and mesh["spec"]["mtls"]["mode"] == "STRICT"
    routing = objects(mocks, "istio-triton-routing")
    subsets = {s["name"] for s in routing["DestinationRule", "triton"]["spec"]["subsets"]}
    assert subsets == {"stable", "canary"}
    (http,) = routing["VirtualService", "triton"]["spec"]["http"]
    assert http["name"] == "primary"
    # Everything on stable until Argo Rollouts moves a step's weight to the canary.
    assert {r["destination"]["subset"]: r["weight"] for r in http["route"]} == {"stable": 100, "canary": 0}


def test_argo_cd_chart_and_applications_sync_automatically_with_waves():
    mocks = register("prod", lambda cfg: ArgoCD("argocd", cfg, child_applications(cfg)))
    assert mocks.one(CHART, "argo-cd").inputs["version"] == MATRIX.chart("argo-cd")["version"]
    apps = {r.name: r.inputs for r in mocks.of_type("kubernetes:argoproj.io/v1alpha1:Application")}
    assert set(apps) == {
        "istio-base",
        "istiod",
        "istio-ingressgateway",
        "kube-prometheus-stack",
        "prometheus-adapter",
        "argo-rollouts",
        "gpu-addons",
        "gpu-serving",
    }
    waves = {name: int(app["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"]) for name, app in apps.items()}
    assert waves["istio-base"] < waves["istiod"] < waves["gpu-serving"]
    assert waves["kube-prometheus-stack"] < waves["prometheus-adapter"] < waves["gpu-serving"]
    assert waves["kube-prometheus-stack"] < waves["argo-rollouts"] < waves["gpu-serving"]
    assert waves["istiod"] < waves["istio-ingressgateway"]
    for app in apps.values():
        assert app["spec"]["syncPolicy"]["automated"] == {"prune": True, "selfHeal": True}
    # The AppProjects exist before any Application that names them.
    appprojects = mocks.of_type("kubernetes:argoproj.io/v1alpha1:AppProject")
    assert {r.inputs["metadata"]["name"] for r in appprojects} >= {app["spec"]["project"] for app in apps.values()}
    serving = apps["gpu-serving"]["spec"]
    assert serving["source"]["path"] == "deploy/serving/prod/manifests"
    ignored = serving["ignoreDifferences"]
    assert {"group": "argoproj.io", "kind": "Rollout", "name": "triton", "jsonPointers": ["/spec/replicas"]} in ignored
    assert {"group": "apps", "kind": "Deployment", "name": "gateway", "jsonPointers": ["/spec/replicas"]} in ignored
    assert "RespectIgnoreDifferences=true" in serving["syncPolicy"]["syncOptions"]
    chart_source = apps["kube-prometheus-stack"]["spec"]["source"]
    assert chart_source["targetRevision"] == MATRIX.chart("kube-prometheus-stack")["version"]
    assert apps["gpu-addons"]["spec"]["source"]["path"] == "deploy/addons/prod"
    (webhook,) = apps["istio-base"]["spec"]["ignoreDifferences"]
    assert webhook["kind"] == "ValidatingWebhookConfiguration"
    assert webhook["jsonPointers"] == ["/webhooks/0/failurePolicy"]
