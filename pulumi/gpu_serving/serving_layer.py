"""The serving layer's objects (serving/ in this repository): the inference gateway in front of
Triton and the drift agent that samples it, built once as plain dicts like manifests.py's.

Clients reach the gateway (its Service, through the mesh); only the gateway reaches Triton's
gRPC port (the NetworkPolicy and AuthorizationPolicy of manifests.py). Both pods run on CPU
nodes: a required node affinity keeps them off every node labelled as having GPUs.
"""

from __future__ import annotations

from gpu_serving.config import Image, StackConfig
from gpu_serving.manifests import (
    CLIENT_LABEL,
    GATEWAY,
    GRPC_PORT,
    ISTIO_NAMESPACE,
    Obj,
    _labels,
    _meta,
    _waivers,
    http_probe,
    principal,
    triton_host,
)

GATEWAY_PORT = 8000  # the gateway's one HTTP port: API, health and /metrics
DRIFT_AGENT = "drift-agent"  # its Deployment, labels and ServiceAccount
DRIFT_PORT = 8080  # the drift agent's /metrics and health
APP_UID = 10001  # a high uid of no host user (checkov CKV_K8S_40); the images' USER
GPU_NODE_LABEL = "nvidia.com/gpu.present"  # set on every GPU node by roles/k8s_addons
# Readiness follows Triton's reachability, never a model's load or state (/readyz reads the
# gateway's own probe, which counts a refused connection at once and three slow answers in a row):
# two failed probes take a pod out of the Service, so a gateway whose event loop is briefly too
# busy to answer within the timeout stays in, and one that lost Triton leaves within 10 s.
READINESS_PERIOD_SECONDS = 5
LIVENESS_PERIOD_SECONDS = 10
# Envoy retries only what never reached the gateway; a 503 the gateway answers (Triton not
# ready) goes back to the client instead of being retried (Istio's default retries 503s).
RETRY_ON = "connect-failure,refused-stream,reset"
# Above Triton's route timeout (triton.ROUTE_TIMEOUT, 30 s): Envoy gives up on the gateway only
# after the gateway has had Triton's answer or timeout to report.
GATEWAY_TIMEOUT = "35s"
# Callers' sidecars close an idle connection to a gateway after GATEWAY_IDLE_TIMEOUT_S; the gateway
# keeps one open GATEWAY_KEEP_ALIVE_MARGIN_S longer, so the caller is always the side that closes.
# The other order races: a request sent on a connection the gateway is closing meets a reset.
GATEWAY_IDLE_TIMEOUT_S = 60
GATEWAY_KEEP_ALIVE_MARGIN_S = 15
# A gateway replica is ejected for what fails at the connection (5 connect failures, resets or
# timeouts in a row, splitExternalLocalOriginErrors), never for the 5xx it answers itself: a 503
# for a model that is not loaded, or a 504, is the same on every replica, and ejecting replicas
# for it would take capacity from the models that work (consecutive5xxErrors 0 turns that off).
# A replica that loses Triton leaves the Service through its readiness instead. At most half go.
GATEWAY_OUTLIER_DETECTION = {
    "splitExternalLocalOriginErrors": True,
    "consecutiveLocalOriginFailures": 5,
    "consecutive5xxErrors": 0,
    "interval": "10s",
    "baseEjectionTime": "30s",
    "maxEjectionPercent": 50,
}
NAME_KEY = "kubernetes.io/metadata.name"


def gateway_host(cfg: StackConfig) -> str:
    return f"gateway.{cfg.triton.namespace}.svc.cluster.local"


def gateway_url(cfg: StackConfig) -> str:
    return f"http://{gateway_host(cfg)}:{GATEWAY_PORT}"


def _off_gpu_nodes() -> Obj:
    """Required: no node labelled as having GPUs (nodes without the label qualify, as in the lab).
    Preferred: replicas on different nodes."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": GPU_NODE_LABEL, "operator": "NotIn", "values": ["true"]}]}
                ]
            }
        },
    }


def _spread(labels: dict[str, str]) -> Obj:
    return {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "podAffinityTerm": {
                    "labelSelector": {"matchLabels": labels},
                    "topologyKey": "kubernetes.io/hostname",
                },
            }
        ]
    }


def app_container_security() -> Obj:
    """The securityContext of a container of this repository's images (USER APP_UID)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": APP_UID,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def _image_waivers(image: Image, key: str) -> dict[str, str]:
    if image.digest:
        return {}
    return _waivers(("CKV_K8S_43", f"no digest in the stack file ({key}.image) yet; the tag is pinned"))


def _deployment(
    cfg: StackConfig, name: str, image: Image, key: str, container: Obj, replicas: int | None, **spec: Obj
) -> Obj:
    labels = _labels(name)
    pod: Obj = {
        "serviceAccountName": name,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 30,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": APP_UID,
            "runAsGroup": APP_UID,
            "fsGroup": APP_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "affinity": _off_gpu_nodes(),
        "containers": [
            {
                "name": name,
                "image": image.ref,
                "imagePullPolicy": "Always",
                **container,
                "securityContext": app_container_security(),
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            }
        ],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}],
    }
    body: Obj = {"selector": {"matchLabels": labels}, **spec, "template": {"metadata": {"labels": labels}, "spec": pod}}
    if replicas is not None:
        body["replicas"] = replicas
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, cfg.triton.namespace, labels, **_image_waivers(image, key)),
        "spec": body,
    }


def _service_account(cfg: StackConfig, name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(name, cfg.triton.namespace, _labels(name)),
        "automountServiceAccountToken": False,
    }


def _service(cfg: StackConfig, name: str, port: int) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, cfg.triton.namespace, _labels(name)),
        "spec": {
            "type": "ClusterIP",
            "selector": _labels(name),
            "ports": [{"name": "http", "port": port, "targetPort": "http", "appProtocol": "http"}],
        },
    }


def _service_monitor(cfg: StackConfig, name: str) -> Obj:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _meta(name, cfg.triton.namespace, _labels(name)),
        "spec": {
            "selector": {"matchLabels": _labels(name)},
            "namespaceSelector": {"matchNames": [cfg.triton.namespace]},
            "endpoints": [{"port": "http", "path": "/metrics", "interval": "15s"}],
        },
    }


def _network_policy(cfg: StackConfig, name: str, port: int, sources: list[Obj]) -> Obj:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(name, cfg.triton.namespace, _labels(name)),
        "spec": {
            "podSelector": {"matchLabels": _labels(name)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": sources, "ports": [{"protocol": "TCP", "port": port}]}],
        },
    }


def _namespaces(key: str, *values: str) -> Obj:
    return {"namespaceSelector": {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}}


def gateway_objects(cfg: StackConfig) -> list[Obj]:
    """ServiceAccount, Deployment (CPU nodes, env GATEWAY_TRITON_GRPC = Triton's gRPC Service
    port), Service, PodDisruptionBudget, HPA on CPU, NetworkPolicy and ServiceMonitor."""
    gateway, ns = cfg.gateway, cfg.triton.namespace
    container: Obj = {
        "env": [
            {"name": "GATEWAY_TRITON_GRPC", "value": f"{triton_host(cfg.triton)}:{GRPC_PORT}"},
            {"name": "GATEWAY_PORT", "value": str(GATEWAY_PORT)},
            {"name": "GATEWAY_KEEP_ALIVE_S", "value": str(GATEWAY_IDLE_TIMEOUT_S + GATEWAY_KEEP_ALIVE_MARGIN_S)},
        ],
        "ports": [{"name": "http", "containerPort": GATEWAY_PORT, "protocol": "TCP"}],
        "resources": {"requests": dict(gateway.resources.requests), "limits": dict(gateway.resources.limits)},
        "livenessProbe": http_probe("/livez", LIVENESS_PERIOD_SECONDS, 3, timeout=2),
        "readinessProbe": http_probe("/readyz", READINESS_PERIOD_SECONDS, 2, timeout=2),
    }
    deployment = _deployment(
        cfg,
        GATEWAY,
        gateway.image,
        "gateway",
        container,
        None,  # the HPA owns the replicas
        strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
    )
    deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"] = _spread(_labels(GATEWAY))
    return [
        _service_account(cfg, GATEWAY),
        deployment,
        _service(cfg, GATEWAY, GATEWAY_PORT),
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": _meta(GATEWAY, ns, _labels(GATEWAY)),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": _labels(GATEWAY)}},
        },
        {
            # CPU, not Triton's queue time: the gateway's own work (JSON validation, tensor
            # conversion, gRPC) is CPU-bound, and Triton's queue is the Triton HPA's signal;
            # more gateways would not shorten it.
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": _meta(GATEWAY, ns, _labels(GATEWAY)),
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": GATEWAY},
                "minReplicas": gateway.min_replicas,
                "maxReplicas": gateway.max_replicas,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": gateway.cpu_target_percent},
                        },
                    }
                ],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}},
            },
        },
        _network_policy(
            cfg,
            GATEWAY,
            GATEWAY_PORT,
            [
                _namespaces(NAME_KEY, ISTIO_NAMESPACE),  # the Istio gateways
                _namespaces(CLIENT_LABEL, "true"),  # client namespaces
                {"podSelector": {"matchLabels": _labels(DRIFT_AGENT)}},  # GET /v1/samples
                _namespaces(NAME_KEY, cfg.monitoring.namespace),  # Prometheus: /metrics
            ],
        ),
        _service_monitor(cfg, GATEWAY),
    ]


def drift_agent_objects(cfg: StackConfig) -> list[Obj]:
    """ServiceAccount, Deployment (one replica, DRIFT_GATEWAY = the gateway Service's URL),
    Service, NetworkPolicy (Prometheus only) and ServiceMonitor."""
    drift = cfg.drift_agent
    container: Obj = {
        "env": [
            {"name": "DRIFT_GATEWAY", "value": gateway_url(cfg)},
            {"name": "DRIFT_PORT", "value": str(DRIFT_PORT)},
        ],
        "ports": [{"name": "http", "containerPort": DRIFT_PORT, "protocol": "TCP"}],
        "resources": {"requests": dict(drift.resources.requests), "limits": dict(drift.resources.limits)},
        "livenessProbe": http_probe("/livez", LIVENESS_PERIOD_SECONDS, 3, timeout=2),
        "readinessProbe": http_probe("/readyz", LIVENESS_PERIOD_SECONDS, 3, timeout=2),
    }
    # Recreate: the samples endpoint drains the gateway's buffer, so two agents during a
    # rolling update would each see half the traffic.
    return [
        _service_account(cfg, DRIFT_AGENT),
        _deployment(cfg, DRIFT_AGENT, drift.image, "driftAgent", container, 1, strategy={"type": "Recreate"}),
        _service(cfg, DRIFT_AGENT, DRIFT_PORT),
        _network_policy(cfg, DRIFT_AGENT, DRIFT_PORT, [_namespaces(NAME_KEY, cfg.monitoring.namespace)]),
        _service_monitor(cfg, DRIFT_AGENT),
    ]


def _plaintext_port(cfg: StackConfig, name: str, port: int) -> Obj:
    """Prometheus is outside the mesh: it scrapes this port in plaintext; the
    AuthorizationPolicy decides what a plaintext request may do there."""
    return {
        "apiVersion": "security.istio.io/v1",
        "kind": "PeerAuthentication",
        "metadata": _meta(f"{name}-metrics", cfg.triton.namespace, _labels(name)),
        "spec": {
            "selector": {"matchLabels": _labels(name)},
            "mtls": {"mode": "STRICT"},
            "portLevelMtls": {str(port): {"mode": "PERMISSIVE"}},
        },
    }


def _read_only_endpoints(*paths: str) -> Obj:
    return {"to": [{"operation": {"methods": ["GET"], "paths": list(paths)}}]}


def _authorization(cfg: StackConfig, name: str, rules: list[Obj]) -> Obj:
    return {
        "apiVersion": "security.istio.io/v1",
        "kind": "AuthorizationPolicy",
        "metadata": _meta(name, cfg.triton.namespace, _labels(name)),
        "spec": {"selector": {"matchLabels": _labels(name)}, "action": "ALLOW", "rules": rules},
    }


def routing_objects(cfg: StackConfig) -> list[Obj]:
    """The gateway's VirtualService (a timeout, retries that never repeat an answered request) and
    DestinationRule (callers close idle connections first, outlier detection), and for
    the gateway and the drift agent a plaintext port for Prometheus with an
    AuthorizationPolicy: anyone may GET /metrics and the health endpoints, inference needs a
    mesh identity (mTLS), and only the drift agent may drain /v1/samples."""
    host = gateway_host(cfg)
    return [
        {
            "apiVersion": "networking.istio.io/v1",
            "kind": "VirtualService",
            "metadata": _meta(GATEWAY, cfg.triton.namespace, _labels(GATEWAY)),
            "spec": {
                "hosts": [host],
                "http": [
                    {
                        "name": GATEWAY,
                        "route": [{"destination": {"host": host, "port": {"number": GATEWAY_PORT}}}],
                        "timeout": GATEWAY_TIMEOUT,
                        "retries": {"attempts": 2, "retryOn": RETRY_ON},
                    }
                ],
            },
        },
        {
            "apiVersion": "networking.istio.io/v1",
            "kind": "DestinationRule",
            "metadata": _meta(GATEWAY, cfg.triton.namespace, _labels(GATEWAY)),
            "spec": {
                "host": host,
                "trafficPolicy": {
                    "connectionPool": {"http": {"idleTimeout": f"{GATEWAY_IDLE_TIMEOUT_S}s"}},
                    "outlierDetection": dict(GATEWAY_OUTLIER_DETECTION),
                },
            },
        },
        _plaintext_port(cfg, GATEWAY, GATEWAY_PORT),
        _authorization(
            cfg,
            GATEWAY,
            [
                _read_only_endpoints("/metrics", "/livez", "/readyz"),
                {
                    "from": [{"source": {"principals": [principal(cfg, DRIFT_AGENT)]}}],
                    "to": [{"operation": {"methods": ["GET"], "paths": ["/v1/samples/*"]}}],
                },
                {
                    "from": [{"source": {"principals": ["*"]}}],
                    "to": [{"operation": {"methods": ["POST"], "paths": ["/v1/*"]}}],
                },
            ],
        ),
        _plaintext_port(cfg, DRIFT_AGENT, DRIFT_PORT),
        _authorization(cfg, DRIFT_AGENT, [_read_only_endpoints("/metrics", "/livez", "/readyz")]),
    ]
