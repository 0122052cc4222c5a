"""Every Kubernetes object of the serving stack, built once as plain dicts.

The Pulumi components register these dicts and the renderer writes them as YAML, so a
`pulumi up` and an Argo CD sync of deploy/serving/<env>/ apply the same objects. Functions
of the StackConfig, no Pulumi; the only files read are monitoring/'s (its generated dashboards,
and the rules source with the matrix pin it reads).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpu_serving.config import StackConfig, Triton
from monitoring import build as monitoring_rules
from monitoring.build import GENERATED

Obj = dict[str, Any]

HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
DASHBOARDS: Path = GENERATED / "dashboards"  # written by `python -m monitoring build`
TRITON_UID = 1000  # the triton-server user of the NGC image
ISTIO_NAMESPACE = "istio-system"
ARGOCD_NAMESPACE = "argocd"
GRAFANA_ADMIN_SECRET = "grafana-admin"
# The HPA's metric: a name of the custom metrics API only, which prometheus-adapter serves from
# the recording rule monitoring.rules.POD_QUEUE_TIME (query that one in Prometheus).
QUEUE_METRIC = "triton_queue_duration_us_per_request"
PROBE_PERIOD_SECONDS = 10
WAVE = "argocd.argoproj.io/sync-wave"
CLIENT_LABEL = "gpu-serving.example.com/gateway-client"  # a namespace label: may call the gateway
# The gateway's name: its Deployment, labels and ServiceAccount (its mesh identity, Triton's only client).
GATEWAY = "gateway"


def _labels(name: str, track: str | None = None) -> dict[str, str]:
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "gpu-serving"}
    if track:
        labels["gpu-serving.example.com/track"] = track
    return labels


def _meta(name: str, namespace: str | None, labels: dict[str, str], **annotations: str) -> Obj:
    meta: Obj = {"name": name, "labels": labels}
    if namespace:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def _waivers(*reasons: tuple[str, str]) -> dict[str, str]:
    """checkov reads one `checkov.io/skipN: CHECK_ID=reason` annotation per waived check."""
    return {f"checkov.io/skip{index}": f"{check}={reason}" for index, (check, reason) in enumerate(reasons, 1)}


def triton_host(triton: Triton) -> str:
    return f"triton.{triton.namespace}.svc.cluster.local"


def namespace(name: str, *, mesh: bool) -> Obj:
    labels = _labels(name)
    if mesh:
        labels["istio-injection"] = "enabled"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(name, None, labels, **{WAVE: "-1"})}


def _container_resources(triton: Triton) -> Obj:
    limits = dict(triton.resources.limits)
    if triton.gpus:
        limits["nvidia.com/gpu"] = str(triton.gpus)
    return {"requests": dict(triton.resources.requests), "limits": limits}


def _triton_args(triton: Triton, model_repository: str) -> list[str]:
    args = [
        f"--model-repository={model_repository}",
        f"--model-control-mode={triton.model_control_mode}",
        "--strict-readiness=true",
        "--exit-on-error=true",
        f"--http-port={HTTP_PORT}",
        f"--grpc-port={GRPC_PORT}",
        "--allow-metrics=true",
        f"--metrics-port={METRICS_PORT}",
        # Latency quantiles (P50/P95/P99) for the recording rules; the counters stay on.
        "--metrics-config=summary_latencies=true",
    ]
    if triton.model_control_mode == "explicit":
        args.append("--load-model=*")
    return args


def _probes(triton: Triton) -> Obj:
    def http(path: str, period: int, failures: int) -> Obj:
        return {
            "httpGet": {"path": path, "port": "http"},
            "periodSeconds": period,
            "timeoutSeconds": 5,
            "failureThreshold": failures,
        }

    # Triton opens its endpoints once the startup models are loaded: the startup probe gives
    # that load its budget, and liveness starts counting only afterwards.
    startup_failures = -(-triton.startup_budget_seconds // PROBE_PERIOD_SECONDS)
    return {
        "startupProbe": http("/v2/health/live", PROBE_PERIOD_SECONDS, startup_failures),
        "livenessProbe": http("/v2/health/live", PROBE_PERIOD_SECONDS, 3),
        "readinessProbe": http("/v2/health/ready", 5, 3),
    }


def _deployment(triton: Triton, name: str, track: str, image: str, model_repository: str, replicas: int | None) -> Obj:
    pod_labels = _labels("triton", track)
    container: Obj = {
        "name": "triton",
        "image": image,
        "imagePullPolicy": "Always",
        "command": ["tritonserver"],
        "args": _triton_args(triton, model_repository),
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "resources": _container_resources(triton),
        **_probes(triton),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": TRITON_UID,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/tmp"}],
    }
    spec: Obj = {
        "selector": {"matchLabels": pod_labels},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
        "template": {
            "metadata": {"labels": pod_labels},
            "spec": {
                "serviceAccountName": "triton",
                "automountServiceAccountToken": False,
                "terminationGracePeriodSeconds": 60,
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": TRITON_UID,
                    "runAsGroup": TRITON_UID,
                    "fsGroup": TRITON_UID,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "nodeSelector": dict(triton.node_selector),
                "tolerations": [dict(t) for t in triton.tolerations],
                "containers": [container],
                "volumes": [
                    {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
                    {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
                ],
            },
        },
    }
    if replicas is not None:  # the stable Deployment leaves replicas to its HPA
        spec["replicas"] = replicas
    annotations = _waivers(
        ("CKV_K8S_43", "no digest is recorded in platform_matrix/matrix.yml yet; the tag is pinned there"),
        ("CKV_K8S_40", f"the NGC image runs as its triton-server user, uid {TRITON_UID}"),
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, triton.namespace, pod_labels, **annotations),
        "spec": spec,
    }


def principal(cfg: StackConfig, service_account: str) -> str:
    """The Istio identity (SPIFFE, without the scheme) of a service account of the serving namespace."""
    return f"cluster.local/ns/{cfg.triton.namespace}/sa/{service_account}"


def _network_policy(cfg: StackConfig) -> Obj:
    """Inference (gRPC) from the gateway's pods only; metrics from the monitoring namespace only.
    Clients call the gateway (serving_layer), never Triton."""
    name_key = "kubernetes.io/metadata.name"
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta("triton", cfg.triton.namespace, _labels("triton")),
        "spec": {
            "podSelector": {"matchLabels": _labels("triton")},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": _labels(GATEWAY)}}],
                    "ports": [{"protocol": "TCP", "port": GRPC_PORT}],
                },
                {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchExpressions": [
                                    {"key": name_key, "operator": "In", "values": [cfg.monitoring.namespace]}
                                ]
                            }
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": METRICS_PORT}],
                },
            ],
        },
    }


def triton_objects(cfg: StackConfig) -> list[Obj]:
    """Namespace, ServiceAccount, Deployments (stable and, with a canary weight, canary),
    Service, PodDisruptionBudget, HPA on queue time, NetworkPolicy and ServiceMonitor."""
    triton = cfg.triton
    ns = triton.namespace
    objects = [
        namespace(ns, mesh=True),
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta("triton", ns, _labels("triton"), **dict(triton.service_account_annotations)),
            "automountServiceAccountToken": False,
        },
        _deployment(triton, "triton", "stable", triton.image, triton.model_repository, None),
    ]
    canary = triton.canary
    if canary.weight:
        objects.append(
            _deployment(triton, "triton-canary", "canary", canary.image, canary.model_repository, canary.replicas)
        )
    objects += [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta("triton", ns, _labels("triton")),
            "spec": {
                "type": "ClusterIP",
                "selector": _labels("triton"),
                "ports": [
                    {"name": "http-infer", "port": HTTP_PORT, "targetPort": "http", "appProtocol": "http"},
                    {"name": "grpc-infer", "port": GRPC_PORT, "targetPort": "grpc", "appProtocol": "grpc"},
                    {"name": "http-metrics", "port": METRICS_PORT, "targetPort": "metrics", "appProtocol": "http"},
                ],
            },
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": _meta("triton", ns, _labels("triton")),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": _labels("triton", "stable")}},
        },
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": _meta("triton", ns, _labels("triton")),
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "triton"},
                "minReplicas": triton.min_replicas,
                "maxReplicas": triton.max_replicas,
                "metrics": [
                    {
                        "type": "Pods",
                        "pods": {
                            "metric": {"name": QUEUE_METRIC},
                            "target": {"type": "AverageValue", "averageValue": str(triton.queue_time_target_us)},
                        },
                    }
                ],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}},
            },
        },
        _network_policy(cfg),
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": _meta("triton", ns, _labels("triton")),
            "spec": {
                "selector": {"matchLabels": _labels("triton")},
                "namespaceSelector": {"matchNames": [ns]},
                "endpoints": [{"port": "http-metrics", "path": "/metrics", "interval": "15s"}],
            },
        },
    ]
    return objects


def mesh_objects() -> list[Obj]:
    """Mesh-wide mutual TLS: a PeerAuthentication in the Istio root namespace."""
    return [
        {
            "apiVersion": "security.istio.io/v1",
            "kind": "PeerAuthentication",
            "metadata": _meta("default", ISTIO_NAMESPACE, _labels("istio")),
            "spec": {"mtls": {"mode": "STRICT"}},
        }
    ]


def triton_routing_objects(cfg: StackConfig) -> list[Obj]:
    """DestinationRule subsets, the weighted VirtualService (the gateway's sidecar applies it to
    the gateway's calls), a plaintext metrics port for Prometheus (which is outside the mesh),
    and an AuthorizationPolicy: gRPC from the gateway's mesh identity only, GET on the metrics
    port from anyone the NetworkPolicy lets in (Prometheus)."""
    triton = cfg.triton
    host = triton_host(triton)
    weight = triton.canary.weight
    routes = [{"destination": {"host": host, "subset": "stable"}, "weight": 100 - weight}]
    if weight:
        routes.append({"destination": {"host": host, "subset": "canary"}, "weight": weight})
    return [
        {
            "apiVersion": "networking.istio.io/v1",
            "kind": "DestinationRule",
            "metadata": _meta("triton", triton.namespace, _labels("triton")),
            "spec": {
                "host": host,
                "subsets": [
                    {"name": track, "labels": {"gpu-serving.example.com/track": track}}
                    for track in ("stable", "canary")
                ],
            },
        },
        {
            "apiVersion": "networking.istio.io/v1",
            "kind": "VirtualService",
            "metadata": _meta("triton", triton.namespace, _labels("triton")),
            "spec": {"hosts": [host], "http": [{"name": "triton", "route": routes}]},
        },
        {
            "apiVersion": "security.istio.io/v1",
            "kind": "PeerAuthentication",
            "metadata": _meta("triton-metrics", triton.namespace, _labels("triton")),
            "spec": {
                "selector": {"matchLabels": _labels("triton")},
                "mtls": {"mode": "STRICT"},
                "portLevelMtls": {str(METRICS_PORT): {"mode": "PERMISSIVE"}},
            },
        },
        {
            "apiVersion": "security.istio.io/v1",
            "kind": "AuthorizationPolicy",
            "metadata": _meta("triton", triton.namespace, _labels("triton")),
            "spec": {
                "selector": {"matchLabels": _labels("triton")},
                "action": "ALLOW",
                "rules": [
                    {
                        "from": [{"source": {"principals": [principal(cfg, GATEWAY)]}}],
                        "to": [{"operation": {"ports": [str(GRPC_PORT)]}}],
                    },
                    {"to": [{"operation": {"ports": [str(METRICS_PORT)], "methods": ["GET"]}}]},
                ],
            },
        },
    ]


def monitoring_objects(cfg: StackConfig) -> list[Obj]:
    """A ConfigMap per Grafana dashboard for Grafana's sidecar (the JSON that monitoring/dashboards.py
    generates, read as committed so a deploy needs no dashboard SDK), and
    the recording rules and alerts of monitoring/rules.py as a PrometheusRule, which
    kube-prometheus-stack's Prometheus selects (ruleSelectorNilUsesHelmValues: false). The
    monitoring namespace is Pulumi's (GrafanaAdmin, which also holds the admin Secret), or the
    chart Application's."""
    ns = cfg.monitoring.namespace
    labels = _labels("grafana") | {"grafana_dashboard": "1"}
    objects: list[Obj] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(f"{board.stem}-dashboard", ns, labels),
            "data": {board.name: board.read_text(encoding="utf-8")},
        }
        for board in sorted(DASHBOARDS.glob("*.json"), key=lambda path: path.stem)
    ]
    objects.append(
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": _meta("gpu-serving", ns, _labels("prometheus")),
            "spec": monitoring_rules.rule_document(),
        }
    )
    return objects
