"""Triton's objects, as plain dicts like manifests.py's: the Rollout that canaries every new pod
template (Argo Rollouts, Istio traffic routing), its Services, HPA, PDB, PriorityClass,
NetworkPolicy and ServiceMonitor, and its Istio routing and authorization.

The Rollout (issue 15) replaces the two Deployments of the static split. Argo Rollouts moves
the weights of the VirtualService route `primary` between the DestinationRule subsets `stable`
and `canary` (it writes `rollouts-pod-template-hash` into each subset's labels) step by step,
runs the AnalysisTemplates of analysis.py between the weights, and on an abort (a failed
analysis, `kubectl argo rollouts abort`, or a progress deadline) sets the canary's weight back
to 0: all traffic goes to stable at once, since the stable ReplicaSet keeps its full size during
the whole canary (dynamicStableScale off).

Resilience: replicas spread over zones and nodes, a PriorityClass above batch work on the GPU
nodes, a preStop drain that takes the pod out of every endpoint list before Triton is told to
stop, Envoy timeouts, retries of requests that never reached a Triton process, and outlier
detection that ejects a failing pod for a while.
"""

from __future__ import annotations

from gpu_serving import analysis, model_store
from gpu_serving.config import StackConfig, Step, Triton
from gpu_serving.manifests import (
    GATEWAY,
    GRPC_PORT,
    HTTP_PORT,
    METRICS_PORT,
    PROBE_PERIOD_SECONDS,
    QUEUE_METRIC,
    TRITON_UID,
    Obj,
    _labels,
    _meta,
    _waivers,
    http_probe,
    namespace,
    principal,
    triton_host,
)

ROLLOUT_API = "argoproj.io/v1alpha1"
# The pod label Argo Rollouts puts on each ReplicaSet's pods, and the Prometheus label the
# ServiceMonitor copies it to (the AnalysisTemplates select the tracks by it).
POD_HASH_LABEL = "rollouts-pod-template-hash"
POD_HASH_METRIC_LABEL = "rollouts_pod_template_hash"
ROUTE = "primary"  # the VirtualService route whose weights the Rollout sets
SUBSETS = ("stable", "canary")
PRIORITY_CLASS = "gpu-serving-triton"
# Above the default (0) and any batch work on the GPU nodes, far below system-cluster-critical
# (2,000,000,000): a pending Triton pod may preempt lower-priority pods, never the node's own.
PRIORITY = 1_000_000
# Drain: Kubernetes removes a deleted pod from the Services' endpoints while preStop sleeps, so the
# gateways' sidecars stop sending to it before Triton gets SIGTERM; Triton then finishes what is
# in flight, for at most EXIT_TIMEOUT_SECONDS (--exit-timeout-secs), and exits.
PRE_STOP_SECONDS = 15
EXIT_TIMEOUT_SECONDS = 30
TERMINATION_GRACE_SECONDS = PRE_STOP_SECONDS + EXIT_TIMEOUT_SECONDS + 15
# One inference through Envoy: the queue timeout of the example models (2 s) plus the compute of
# a large batch, with room. Triton answers an overloaded queue with UNAVAILABLE long before this.
ROUTE_TIMEOUT = "30s"
# A pod that asks for GPUs runs under the nvidia runtime: containerd's default is runc and the
# device plugin hands GPUs over as volume mounts that only the nvidia runtime reads (the
# RuntimeClass of roles/k8s_addons, k8s_addons_runtime_class).
GPU_RUNTIME_CLASS = "nvidia"
# The node agent of limiter/ never throttles a pod carrying this (besides the serving stack's
# protect rule that roles/k8s_addons renders for every environment): Triton loading a large
# model must not be capped by the agent that exists to protect it.
LIMITER_PROTECTED = "limiter.gpu-serving.io/protected"
# Retry only what never reached a Triton process: a second attempt goes to another pod (Envoy's
# default retry host predicate is off, but round robin picks another). An answered error, and a
# queue rejection above all, goes back to the gateway: retrying it would add load where there is too much.
RETRY_ON = "connect-failure,refused-stream"
# Five 5xx in a row (Envoy maps gRPC statuses: UNAVAILABLE is a 503) eject a pod for 30 s, longer
# each time; never more than half of the pods, so an overload that fails every pod is not
# turned into an outage of all of them.
OUTLIER_DETECTION = {
    "consecutive5xxErrors": 5,
    "interval": "10s",
    "baseEjectionTime": "30s",
    "maxEjectionPercent": 50,
}
# After a promotion, the old ReplicaSet stays up this long so every sidecar has the new weights
# (100/0) before its pods go; after an abort, the canary pods stay as long (in-flight requests
# end, then their GPUs are freed). Argo Rollouts' default for both is 30 s.
SCALE_DOWN_DELAY_SECONDS = 60
ABORT_SCALE_DOWN_DELAY_SECONDS = 60


def _container_resources(triton: Triton) -> Obj:
    limits = dict(triton.resources.limits)
    if triton.gpus:
        limits["nvidia.com/gpu"] = str(triton.gpus)
    return {"requests": dict(triton.resources.requests) | model_store.storage_requests(triton), "limits": limits}


def _triton_args(triton: Triton) -> list[str]:
    args = [
        f"--model-repository={model_store.repository(triton)}",
        f"--model-control-mode={triton.model_control_mode}",
        "--strict-readiness=true",
        "--exit-on-error=true",
        f"--exit-timeout-secs={EXIT_TIMEOUT_SECONDS}",
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
        return http_probe(path, period, failures, timeout=5)

    # Triton opens its endpoints once the startup models are loaded: the startup probe gives
    # that load its budget, and liveness starts counting only afterwards.
    startup_failures = -(-triton.startup_budget_seconds // PROBE_PERIOD_SECONDS)
    return {
        "startupProbe": http("/v2/health/live", PROBE_PERIOD_SECONDS, startup_failures),
        "livenessProbe": http("/v2/health/live", PROBE_PERIOD_SECONDS, 3),
        "readinessProbe": http("/v2/health/ready", 5, 3),
    }


def _spread(labels: dict[str, str]) -> list[Obj]:
    """Each ReplicaSet's pods (matchLabelKeys: per pod-template hash, so a one-pod canary does not
    count against the stable's spread) over zones, then nodes. ScheduleAnyway: a GPU pool of
    one zone, or fewer nodes than pods, still schedules; the scheduler only prefers the spread."""
    return [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": labels},
            "matchLabelKeys": [POD_HASH_LABEL],
        }
        for key in ("topology.kubernetes.io/zone", "kubernetes.io/hostname")
    ]


def triton_pod_template(cfg: StackConfig) -> Obj:
    """Triton's pod: the one template every revision of the Rollout is built from. A change to
    anything in it (image, model repository, args) is a new revision, which the Rollout canaries."""
    triton = cfg.triton
    labels = _labels("triton")
    container: Obj = {
        "name": "triton",
        "image": triton.image,
        "imagePullPolicy": "Always",
        "command": ["tritonserver"],
        "args": _triton_args(triton),
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "resources": _container_resources(triton),
        **_probes(triton),
        "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SECONDS}}},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": TRITON_UID,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/tmp"}],
    }
    for field, entries in model_store.container(triton).items():  # the release's volume, the store's credentials
        container[field] = container.get(field, []) + entries
    # The sidecar keeps its connections for the whole drain: without this Envoy drains for its
    # default 5 s after SIGTERM and cuts the requests Triton is still finishing.
    drain = f'{{"terminationDrainDuration": "{PRE_STOP_SECONDS + EXIT_TIMEOUT_SECONDS}s"}}'
    return {
        "metadata": {
            "labels": labels,
            "annotations": {"proxy.istio.io/config": drain, LIMITER_PROTECTED: "true"}
            | model_store.annotations(triton),
        },
        "spec": {
            "serviceAccountName": "triton",
            "automountServiceAccountToken": False,
            **({"runtimeClassName": GPU_RUNTIME_CLASS} if triton.gpus else {}),
            "priorityClassName": PRIORITY_CLASS,
            "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": TRITON_UID,
                "runAsGroup": TRITON_UID,
                "fsGroup": TRITON_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "nodeSelector": dict(triton.node_selector),
            "tolerations": [dict(t) for t in triton.tolerations],
            "topologySpreadConstraints": _spread(labels),
            "containers": [container],
            "volumes": [
                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
                {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
                *model_store.volumes(triton),
            ],
        },
    }


def _analysis_step(step: Step) -> Obj:
    """Every template gets both tracks' hashes; Argo Rollouts fills them in at run time."""
    args = [
        {"name": "stable-hash", "valueFrom": {"podTemplateHashValue": "Stable"}},
        {"name": "canary-hash", "valueFrom": {"podTemplateHashValue": "Latest"}},
    ]
    return {"analysis": {"templates": [{"templateName": name} for name in step.analysis], "args": args}}


def rollout_steps(cfg: StackConfig) -> list[Obj]:
    """The stack's steps (config.py has refused any weight without an analysis after it)."""
    steps: list[Obj] = []
    for step in cfg.triton.canary.steps:
        if step.set_weight is not None:
            steps.append({"setWeight": step.set_weight})
        elif step.pause is not None:
            steps.append({"pause": {"duration": step.pause}})
        else:
            steps.append(_analysis_step(step))
    return steps


def rollout(cfg: StackConfig) -> Obj:
    """No `replicas`: the HPA owns them (and Argo CD ignores them, gitops.py)."""
    triton = cfg.triton
    labels = _labels("triton")
    annotations = _waivers(
        ("CKV_K8S_43", "no digest is recorded in platform_matrix/matrix.yml yet; the tag is pinned there"),
        ("CKV_K8S_40", f"the NGC image runs as its triton-server user, uid {TRITON_UID}"),
        *model_store.waivers(triton),
    )
    canary: Obj = {
        "stableService": analysis.STABLE_SERVICE,
        "canaryService": analysis.CANARY_SERVICE,
        "trafficRouting": {
            "istio": {
                "virtualService": {"name": "triton", "routes": [ROUTE]},
                "destinationRule": {"name": "triton", "stableSubsetName": "stable", "canarySubsetName": "canary"},
            }
        },
        # New pods first, none taken away before its replacement is ready (GPU capacity).
        "maxSurge": "25%",
        "maxUnavailable": 0,
        "scaleDownDelaySeconds": SCALE_DOWN_DELAY_SECONDS,
        "abortScaleDownDelaySeconds": ABORT_SCALE_DOWN_DELAY_SECONDS,
        "steps": rollout_steps(cfg),
    }
    return {
        "apiVersion": ROLLOUT_API,
        "kind": "Rollout",
        "metadata": _meta("triton", triton.namespace, labels, **annotations),
        "spec": {
            "selector": {"matchLabels": labels},
            "revisionHistoryLimit": 3,
            # A canary whose pods never become ready (a model that does not load) aborts once the
            # model load budget and five minutes have passed: traffic stays on stable.
            "progressDeadlineSeconds": triton.startup_budget_seconds + 300,
            "progressDeadlineAbort": True,
            "template": triton_pod_template(cfg),
            "strategy": {"canary": canary},
        },
    }


def _service(cfg: StackConfig, name: str) -> Obj:
    """`triton` selects every Triton pod (the VirtualService's host); the track Services start with
    the same selector, and Argo Rollouts adds each track's pod-template hash to theirs."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, cfg.triton.namespace, _labels(name)),
        "spec": {
            "type": "ClusterIP",
            "selector": _labels("triton"),
            "ports": [
                {"name": "http-infer", "port": HTTP_PORT, "targetPort": "http", "appProtocol": "http"},
                {"name": "grpc-infer", "port": GRPC_PORT, "targetPort": "grpc", "appProtocol": "grpc"},
                {"name": "http-metrics", "port": METRICS_PORT, "targetPort": "metrics", "appProtocol": "http"},
            ],
        },
    }


def priority_class() -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": _meta(PRIORITY_CLASS, None, _labels("triton")),
        "value": PRIORITY,
        "globalDefault": False,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": "Triton Inference Server: online inference, above batch work on the GPU nodes.",
    }


def _network_policy(cfg: StackConfig) -> Obj:
    """Inference (gRPC) from the gateway's pods and the golden-set Job's only; metrics from the
    monitoring namespace only. Clients call the gateway (serving_layer), never Triton."""
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
                    "from": [
                        {"podSelector": {"matchLabels": _labels(GATEWAY)}},
                        {"podSelector": {"matchLabels": _labels(analysis.GOLDEN_SERVICE_ACCOUNT)}},
                    ],
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


def _service_monitor(cfg: StackConfig) -> Obj:
    """Every series of a pod carries its pod-template hash: the AnalysisTemplates tell the
    canary's pods from the stable's by it."""
    relabel = {
        "action": "replace",
        "sourceLabels": ["__meta_kubernetes_pod_label_" + POD_HASH_LABEL.replace("-", "_")],
        "targetLabel": POD_HASH_METRIC_LABEL,
    }
    ns = cfg.triton.namespace
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _meta("triton", ns, _labels("triton")),
        "spec": {
            # Only the `triton` Service: the track Services (named triton-stable, triton-canary)
            # select the same pods, which would be scraped again.
            "selector": {"matchLabels": _labels("triton")},
            "namespaceSelector": {"matchNames": [ns]},
            "endpoints": [{"port": "http-metrics", "path": "/metrics", "interval": "15s", "relabelings": [relabel]}],
        },
    }


def triton_objects(cfg: StackConfig) -> list[Obj]:
    """Namespace, PriorityClass, ServiceAccount, the Rollout, its Services, PodDisruptionBudget,
    HPA on queue time, NetworkPolicy and ServiceMonitor, the AnalysisTemplates and the golden-set
    Job's ServiceAccount."""
    triton = cfg.triton
    ns = triton.namespace
    return [
        namespace(ns, mesh=True),
        priority_class(),
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta("triton", ns, _labels("triton"), **dict(triton.service_account_annotations)),
            "automountServiceAccountToken": False,
        },
        rollout(cfg),
        _service(cfg, "triton"),
        _service(cfg, analysis.STABLE_SERVICE),
        _service(cfg, analysis.CANARY_SERVICE),
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": _meta("triton", ns, _labels("triton")),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": _labels("triton")}},
        },
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": _meta("triton", ns, _labels("triton")),
            "spec": {
                "scaleTargetRef": {"apiVersion": ROLLOUT_API, "kind": "Rollout", "name": "triton"},
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
        _service_monitor(cfg),
        *analysis.analysis_templates(cfg),
        analysis.golden_service_account(cfg),
    ]


def triton_routing_objects(cfg: StackConfig) -> list[Obj]:
    """DestinationRule subsets (their pod-template-hash labels are Argo Rollouts'), the VirtualService
    whose route `primary` the Rollout weighs (the gateway's sidecar applies it to the gateway's
    calls), a plaintext metrics port for Prometheus (which is outside the mesh), and an
    AuthorizationPolicy: gRPC from the gateway's and the golden-set Job's mesh identities only,
    GET on the metrics port from anyone the NetworkPolicy lets in (Prometheus)."""
    triton = cfg.triton
    host = triton_host(triton)
    route = [{"destination": {"host": host, "subset": "stable"}, "weight": 100}]
    route.append({"destination": {"host": host, "subset": "canary"}, "weight": 0})
    callers = [principal(cfg, GATEWAY), principal(cfg, analysis.GOLDEN_SERVICE_ACCOUNT)]
    return [
        {
            "apiVersion": "networking.istio.io/v1",
            "kind": "DestinationRule",
            "metadata": _meta("triton", triton.namespace, _labels("triton")),
            "spec": {
                "host": host,
                "trafficPolicy": {"outlierDetection": dict(OUTLIER_DETECTION)},
                "subsets": [{"name": subset} for subset in SUBSETS],
            },
        },
        {
            "apiVersion": "networking.istio.io/v1",
            "kind": "VirtualService",
            "metadata": _meta("triton", triton.namespace, _labels("triton")),
            "spec": {
                "hosts": [host],
                "http": [
                    {
                        "name": ROUTE,
                        "route": route,
                        "timeout": ROUTE_TIMEOUT,
                        "retries": {"attempts": 2, "retryOn": RETRY_ON},
                    }
                ],
            },
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
                        "from": [{"source": {"principals": callers}}],
                        "to": [{"operation": {"ports": [str(GRPC_PORT)]}}],
                    },
                    {"to": [{"operation": {"ports": [str(METRICS_PORT)], "methods": ["GET"]}}]},
                ],
            },
        },
    ]
