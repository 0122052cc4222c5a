"""Argo CD AppProjects: which repositories each Application may sync, into which namespaces,
and which kinds it may create. No Application of the stack is in the `default` project,
which allows everything.

- gpu-bootstrap: the app-of-apps. Only Application objects, only in Argo CD's namespace.
- gpu-platform: the pinned charts (Istio with its ingress gateway, kube-prometheus-stack,
  prometheus-adapter, Argo Rollouts), from their chart repositories, into their own namespaces.
  Charts install cluster-wide kinds: the list below was read from the chart sources at the
  pinned versions (CRDs, RBAC, admission webhooks, prometheus-adapter's APIService; Argo
  Rollouts' chart adds CRDs and ClusterRoles only, its aggregate roles included).
- gpu-addons: deploy/addons/<inventory> from git: the add-ons' namespace, RBAC and the GPU
  Node objects (labels and taints).
- gpu-serving: deploy/serving/<env>/manifests from git: namespaced kinds (the Rollout and its
  AnalysisTemplates among them), the namespace itself and Triton's PriorityClass (a cluster
  kind, but the serving workload's own: its value is decided with the workload, and the add-ons
  layer is per inventory, not per stack); no Secret and no RBAC.

Pulumi creates the projects with Argo CD (components.ArgoCD), before any Application; the
renderer writes them to deploy/serving/<env>/projects/ for a cluster bootstrapped by hand.
"""

from __future__ import annotations

from gpu_serving.charts import synced_releases
from gpu_serving.config import StackConfig
from gpu_serving.manifests import ARGOCD_NAMESPACE, ISTIO_NAMESPACE, Obj

BOOTSTRAP = "gpu-bootstrap"
PLATFORM = "gpu-platform"
ADDONS = "gpu-addons"
SERVING = "gpu-serving"
IN_CLUSTER = "https://kubernetes.default.svc"
# roles/k8s_addons/defaults/main.yml: k8s_addons_namespace; the add-ons Application's own
# destination namespace is kube-system.
ADDONS_NAMESPACES = ("gpu-addons", "kube-system")

Kind = tuple[str, str]  # (API group, kind); "" is the core group
NAMESPACE: Kind = ("", "Namespace")
CLUSTER_ROLE: Kind = ("rbac.authorization.k8s.io", "ClusterRole")
CLUSTER_ROLE_BINDING: Kind = ("rbac.authorization.k8s.io", "ClusterRoleBinding")
CHART_CLUSTER_KINDS: tuple[Kind, ...] = (
    NAMESPACE,
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
    ("apiregistration.k8s.io", "APIService"),
)
# RuntimeClass nvidia: the GPU pods' runtime (roles/k8s_addons 10-device-plugin).
ADDONS_CLUSTER_KINDS: tuple[Kind, ...] = (
    NAMESPACE,
    ("", "Node"),
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
    ("node.k8s.io", "RuntimeClass"),
)
SERVING_CLUSTER_KINDS: tuple[Kind, ...] = (NAMESPACE, ("scheduling.k8s.io", "PriorityClass"))
SERVING_KINDS: tuple[Kind, ...] = (
    ("", "ConfigMap"),
    ("", "Service"),
    ("", "ServiceAccount"),
    ("apps", "Deployment"),
    ("argoproj.io", "Rollout"),
    ("argoproj.io", "AnalysisTemplate"),
    ("autoscaling", "HorizontalPodAutoscaler"),
    ("policy", "PodDisruptionBudget"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("monitoring.coreos.com", "PrometheusRule"),
    ("monitoring.coreos.com", "ServiceMonitor"),
    ("networking.istio.io", "DestinationRule"),
    ("networking.istio.io", "Gateway"),
    ("networking.istio.io", "VirtualService"),
    ("security.istio.io", "AuthorizationPolicy"),
    ("security.istio.io", "PeerAuthentication"),
)


def _kinds(kinds: tuple[Kind, ...]) -> list[dict[str, str]]:
    return [{"group": group, "kind": kind} for group, kind in kinds]


def _project(
    name: str,
    description: str,
    repos: list[str],
    namespaces: list[str],
    cluster_kinds: tuple[Kind, ...],
    namespaced_kinds: tuple[Kind, ...] | None = None,
) -> Obj:
    spec: dict = {
        "description": description,
        "sourceRepos": repos,
        "destinations": [{"server": IN_CLUSTER, "namespace": namespace} for namespace in namespaces],
        # An empty whitelist allows no cluster-scoped kind at all.
        "clusterResourceWhitelist": _kinds(cluster_kinds),
    }
    if namespaced_kinds is not None:
        spec["namespaceResourceWhitelist"] = _kinds(namespaced_kinds)
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AppProject",
        "metadata": {
            "name": name,
            "namespace": ARGOCD_NAMESPACE,
            "labels": {"app.kubernetes.io/part-of": "gpu-serving"},
            # Argo CD refuses to delete a project that Applications still use.
            "finalizers": ["resources-finalizer.argocd.argoproj.io"],
        },
        "spec": spec,
    }


def serving_namespaces(cfg: StackConfig) -> list[str]:
    """Where the serving manifests live: Triton's and the gateway's namespace, the monitoring
    namespace (dashboards, PrometheusRule) and istio-system (the mesh-wide mTLS policy)."""
    return sorted({cfg.triton.namespace, cfg.monitoring.namespace, ISTIO_NAMESPACE})


def app_projects(cfg: StackConfig) -> list[Obj]:
    releases = synced_releases(cfg)
    git = [cfg.git_repo_url]
    return [
        _project(
            BOOTSTRAP,
            "The app-of-apps: Applications only.",
            git,
            [ARGOCD_NAMESPACE],
            (),
            (("argoproj.io", "Application"),),
        ),
        _project(
            PLATFORM,
            "The pinned charts: Istio, kube-prometheus-stack, prometheus-adapter, Argo Rollouts.",
            sorted({release.pin.repository for release in releases}),
            sorted({release.namespace for release in releases}),
            CHART_CLUSTER_KINDS,
        ),
        _project(ADDONS, "The GPU node add-ons and Node labels.", git, list(ADDONS_NAMESPACES), ADDONS_CLUSTER_KINDS),
        _project(
            SERVING,
            "Triton, its gateway, routing and monitoring.",
            git,
            serving_namespaces(cfg),
            SERVING_CLUSTER_KINDS,
            SERVING_KINDS,
        ),
    ]
