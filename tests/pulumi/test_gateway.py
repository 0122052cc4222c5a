"""The gateway and the drift agent (pulumi/gpu_serving/serving_layer.py): what the Gateway
component registers under mocks, where the scheduler may put the pods (against the Node objects
the add-ons render for each fleet), and who may reach Triton, the gateway and the drift agent
(NetworkPolicy and Istio AuthorizationPolicy semantics, tests/pulumi/semantics.py)."""

from pathlib import Path

import pytest
import yaml
from gpu_serving.components import Gateway, Istio, Triton
from gpu_serving.config import from_stack_file
from gpu_serving.render import served_objects

import pulumi
from tests.pulumi.pulumi_mocks import RecordingMocks, run_mocked
from tests.pulumi.semantics import Node, Pod, Request, istio_allows, network_allows, schedulable

ROOT = Path(__file__).resolve().parents[2]
ENVS = ("dev", "staging", "prod")
GROUP = "kubernetes:yaml/v2:ConfigGroup"
NS = "triton"
PROMETHEUS = Pod("monitoring", {"app.kubernetes.io/name": "prometheus"})
CLIENTS = Pod("shop", {"app": "checkout"}, {"gpu-serving.example.com/gateway-client": "true"})
STRANGER = Pod("batch", {"app": "etl"})
INGRESS = Pod("istio-system", {"istio": "ingressgateway"})
CLIENT_PRINCIPAL = "cluster.local/ns/shop/sa/checkout"
GATEWAY_PRINCIPAL = f"cluster.local/ns/{NS}/sa/gateway"
DRIFT_PRINCIPAL = f"cluster.local/ns/{NS}/sa/drift-agent"


def registered(env: str) -> RecordingMocks:
    cfg = from_stack_file(env)
    return run_mocked(env, lambda: Gateway("gateway", cfg), {}, [])


def by_key(objs: list[dict]) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def component_objects(env: str) -> dict[tuple[str, str], dict]:
    mocks = registered(env)
    return by_key(
        [*mocks.one(GROUP, "gateway-objects").inputs["objs"], *mocks.one(GROUP, "gateway-drift-agent").inputs["objs"]]
    )


def workload(objs: dict, name: str) -> dict:
    """The Deployment (gateway, drift agent) or Rollout (Triton) of that name."""
    return objs["Deployment", name] if ("Deployment", name) in objs else objs["Rollout", name]


def pod_spec(objs: dict, name: str) -> dict:
    return workload(objs, name)["spec"]["template"]["spec"]


def pod_of(objs: dict, name: str) -> Pod:
    found = workload(objs, name)
    return Pod(found["metadata"]["namespace"], found["spec"]["template"]["metadata"]["labels"])


def gpu_nodes(env: str) -> list[Node]:
    """The fleet's GPU nodes as the add-ons render them (labels and taints); the lab has none."""
    path = ROOT / "deploy" / "addons" / from_stack_file(env).inventory / "40-nodes.yaml"
    if not path.exists():
        return []
    return [
        Node(doc["metadata"]["labels"], tuple(doc["spec"].get("taints", [])))
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
    ]


def service_url(service: dict, port_name: str) -> str:
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == port_name]
    return f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc.cluster.local:{int(port['port'])}"


def test_the_gateway_objects_are_children_of_the_component():
    registered("prod")
    urns = list(pulumi.runtime.settings.SETTINGS.monitor.resources)
    for group in ("gateway-objects", "gateway-drift-agent"):
        assert any(u.endswith(f"gpu-serving:serving:Gateway${GROUP}::{group}") for u in urns), group


@pytest.mark.parametrize("env", ENVS)
def test_the_gateway_runs_on_cpu_nodes_with_its_requests_and_limits(env):
    cfg = from_stack_file(env)
    objs = component_objects(env)
    pod = pod_spec(objs, "gateway")
    (container,) = pod["containers"]
    assert container["resources"] == {
        "requests": dict(cfg.gateway.resources.requests),
        "limits": dict(cfg.gateway.resources.limits),
    }
    assert "nvidia.com/gpu" not in repr(container["resources"]) and "tolerations" not in pod
    cpu_node = Node({"kubernetes.io/hostname": "cpu-1", "kubernetes.io/os": "linux"})
    assert schedulable(pod, cpu_node)
    nodes = gpu_nodes(env)
    assert bool(nodes) == (cfg.triton.gpus > 0)
    triton = by_key(served_objects(cfg))
    for node in nodes:
        assert schedulable(pod_spec(triton, "triton"), node), "Triton belongs on the GPU nodes"
        assert not schedulable(pod, node)
        # Not only the taint: the affinity keeps the gateway off a GPU node whose taint is gone.
        assert not schedulable(pod, Node(node.labels))
    assert schedulable(pod_spec(objs, "drift-agent"), cpu_node)
    assert not any(schedulable(pod_spec(objs, "drift-agent"), Node(n.labels)) for n in nodes)


@pytest.mark.parametrize("env", ENVS)
def test_the_gateway_calls_the_triton_services_grpc_port_and_probes_livez_and_readyz(env):
    cfg = from_stack_file(env)
    objs = component_objects(env)
    (container,) = pod_spec(objs, "gateway")["containers"]
    env_vars = {e["name"]: e["value"] for e in container["env"]}
    triton_service = by_key(served_objects(cfg))["Service", "triton"]
    assert env_vars["GATEWAY_TRITON_GRPC"] == service_url(triton_service, "grpc-infer")
    assert env_vars["GATEWAY_TRITON_GRPC"] == "triton.triton.svc.cluster.local:8001"
    assert env_vars["GATEWAY_PORT"] == "8000"
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    live, ready = container["livenessProbe"], container["readinessProbe"]
    assert (live["httpGet"], ready["httpGet"]) == (
        {"path": "/livez", "port": "http"},
        {"path": "/readyz", "port": "http"},
    )
    # Readiness follows Triton: two failed probes (5 s period) take the pod out of the Service;
    # a refused connection to Triton fails the next probe, slow answers after three in a row.
    assert (ready["periodSeconds"], ready["failureThreshold"]) == (5, 2)
    assert live["failureThreshold"] * live["periodSeconds"] > ready["periodSeconds"]
    (port,) = objs["Service", "gateway"]["spec"]["ports"]
    assert (port["port"], port["targetPort"], port["name"]) == (8000, "http", "http")
    assert container["image"] == cfg.gateway.image.ref == "ghcr.io/gpu-serving/gateway:0.1.0"


@pytest.mark.parametrize("name", ["gateway", "drift-agent"])
def test_the_pods_run_non_root_on_a_read_only_root_with_no_capabilities(name):
    pod = pod_spec(component_objects("prod"), name)
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] >= 10000
    assert pod["serviceAccountName"] == name and pod["automountServiceAccountToken"] is False
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


@pytest.mark.parametrize("env", ENVS)
def test_the_gateway_has_an_hpa_on_cpu_and_a_pdb_in_every_env(env):
    cfg = from_stack_file(env)
    objs = component_objects(env)
    hpa = objs["HorizontalPodAutoscaler", "gateway"]["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "gateway"}
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (cfg.gateway.min_replicas, cfg.gateway.max_replicas)
    (metric,) = hpa["metrics"]
    assert metric["resource"] == {
        "name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": cfg.gateway.cpu_target_percent},
    }
    assert "replicas" not in objs["Deployment", "gateway"]["spec"]
    pdb = objs["PodDisruptionBudget", "gateway"]["spec"]
    assert pdb["maxUnavailable"] == 1
    assert pdb["selector"]["matchLabels"] == objs["Deployment", "gateway"]["spec"]["template"]["metadata"]["labels"]
    if env != "dev":  # a drain or a rollout never takes the last gateway away
        assert cfg.gateway.min_replicas >= 2


@pytest.mark.parametrize("env", ENVS)
def test_the_drift_agent_is_one_replica_that_samples_the_gateway_service(env):
    cfg = from_stack_file(env)
    objs = component_objects(env)
    deployment = objs["Deployment", "drift-agent"]["spec"]
    assert deployment["replicas"] == 1 and deployment["strategy"] == {"type": "Recreate"}
    (container,) = deployment["template"]["spec"]["containers"]
    env_vars = {e["name"]: e["value"] for e in container["env"]}
    assert env_vars["DRIFT_GATEWAY"] == "http://" + service_url(objs["Service", "gateway"], "http")
    assert env_vars["DRIFT_PORT"] == "8080" and container["ports"][0]["containerPort"] == 8080
    assert container["image"] == cfg.drift_agent.image.ref == "ghcr.io/gpu-serving/drift-agent:0.1.0"
    assert container["resources"]["limits"] == dict(cfg.drift_agent.resources.limits)
    for name in ("gateway", "drift-agent"):
        monitor, service = objs["ServiceMonitor", name]["spec"], objs["Service", name]
        assert monitor["selector"]["matchLabels"] == service["metadata"]["labels"]
        assert monitor["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
        (endpoint,) = monitor["endpoints"]
        assert endpoint["path"] == "/metrics" and endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert ("PodDisruptionBudget", "drift-agent") not in objs and ("HorizontalPodAutoscaler", "drift-agent") not in objs


def policies(env: str) -> tuple[list[dict], list[dict], dict]:
    objs = served_objects(from_stack_file(env))
    network = [o for o in objs if o["kind"] == "NetworkPolicy"]
    istio = [o for o in objs if o["kind"] == "AuthorizationPolicy"]
    return network, istio, by_key(objs)


@pytest.mark.parametrize("env", ENVS)
def test_only_the_gateway_and_prometheus_reach_triton(env):
    network, istio, objs = policies(env)
    gateway, drift = pod_of(objs, "gateway"), pod_of(objs, "drift-agent")
    # One pod template for both tracks: Argo Rollouts adds only its pod-template-hash label.
    tritons = [pod_of(objs, "triton")]
    for track in ("abc123", "def456"):
        template = pod_of(objs, "triton")
        tritons.append(Pod(template.namespace, {**template.labels, "rollouts-pod-template-hash": track}))
    for triton in tritons:
        assert network_allows(network, gateway, triton, 8001)
        assert istio_allows(
            istio, triton, Request(8001, "POST", "/inference.GRPCInferenceService/ModelInfer", GATEWAY_PRINCIPAL)
        )
        assert not network_allows(network, gateway, triton, 8000)
        for source in (CLIENTS, STRANGER, INGRESS, drift, PROMETHEUS):
            assert not network_allows(network, source, triton, 8001), source
            assert not network_allows(network, source, triton, 8000), source
        for other in (CLIENT_PRINCIPAL, DRIFT_PRINCIPAL, None):
            assert not istio_allows(
                istio, triton, Request(8001, "POST", "/inference.GRPCInferenceService/ModelInfer", other)
            )
        assert network_allows(network, PROMETHEUS, triton, 8002)
        assert istio_allows(istio, triton, Request(8002, "GET", "/metrics"))
        assert not network_allows(network, CLIENTS, triton, 8002)


@pytest.mark.parametrize("env", ENVS)
def test_clients_reach_the_gateway_and_only_the_drift_agent_drains_its_samples(env):
    network, istio, objs = policies(env)
    gateway, drift = pod_of(objs, "gateway"), pod_of(objs, "drift-agent")
    infer = Request(8000, "POST", "/v1/text-classifier", CLIENT_PRINCIPAL)
    for source in (CLIENTS, INGRESS):
        assert network_allows(network, source, gateway, 8000)
    assert istio_allows(istio, gateway, infer)
    assert not istio_allows(istio, gateway, Request(8000, "POST", "/v1/text-classifier"))  # plaintext
    assert not network_allows(network, STRANGER, gateway, 8000)
    samples = "/v1/samples/text-classifier"
    assert network_allows(network, drift, gateway, 8000)
    assert istio_allows(istio, gateway, Request(8000, "GET", samples, DRIFT_PRINCIPAL))
    assert not istio_allows(istio, gateway, Request(8000, "GET", samples, CLIENT_PRINCIPAL))
    assert not istio_allows(istio, gateway, Request(8000, "GET", samples))
    assert network_allows(network, PROMETHEUS, gateway, 8000)
    for path in ("/metrics", "/livez", "/readyz"):
        assert istio_allows(istio, gateway, Request(8000, "GET", path))
    assert network_allows(network, PROMETHEUS, drift, 8080) and istio_allows(
        istio, drift, Request(8080, "GET", "/metrics")
    )
    assert not network_allows(network, CLIENTS, drift, 8080)
    assert not istio_allows(istio, drift, Request(8080, "POST", "/metrics", CLIENT_PRINCIPAL))


def test_the_semantics_see_an_open_door_when_the_policies_are_gone():
    """Without the policies every source gets through: the denials above are the policies' doing."""
    _network, _istio, objs = policies("prod")
    triton = pod_of(objs, "triton")
    assert network_allows([], STRANGER, triton, 8001)
    assert istio_allows([], triton, Request(8001, "POST", "/x", None))


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_the_istio_component_routes_the_gateway_without_retrying_its_answers(env):
    def build(cfg):
        istio = Istio("istio", cfg)
        triton = Triton("triton", cfg)
        istio.route(cfg, triton)
        istio.route_gateway(cfg, Gateway("gateway", cfg, pulumi.ResourceOptions(depends_on=[triton])))

    cfg = from_stack_file(env)
    mocks = run_mocked(env, lambda: build(cfg), {}, [])
    routing = by_key(mocks.one(GROUP, "istio-gateway-routing").inputs["objs"])
    service = by_key(mocks.one(GROUP, "gateway-objects").inputs["objs"])["Service", "gateway"]
    host = service_url(service, "http").rsplit(":", 1)[0]
    virtual_service = routing["VirtualService", "gateway"]["spec"]
    assert virtual_service["hosts"] == [host]
    (http,) = virtual_service["http"]
    assert http["route"] == [{"destination": {"host": host, "port": {"number": 8000}}}]
    # A 503 the gateway answers (Triton not ready) reaches the client; only failed connects retry.
    assert not {"5xx", "gateway-error", "retriable-status-codes"} & set(http["retries"]["retryOn"].split(","))
    triton_routing = by_key(mocks.one(GROUP, "istio-triton-routing").inputs["objs"])
    assert ("AuthorizationPolicy", "triton") in triton_routing
    metrics = routing["PeerAuthentication", "gateway-metrics"]["spec"]
    assert metrics["mtls"] == {"mode": "STRICT"} and metrics["portLevelMtls"] == {"8000": {"mode": "PERMISSIVE"}}
