"""Argo CD Applications: one per chart release, the add-ons and serving paths, and the root
app-of-apps that syncs them all from git."""

from __future__ import annotations

from typing import Any

from gpu_serving import projects
from gpu_serving.analysis import CANARY_SERVICE, STABLE_SERVICE
from gpu_serving.charts import Release, synced_releases
from gpu_serving.config import StackConfig
from gpu_serving.manifests import ARGOCD_NAMESPACE, GATEWAY, WAVE, Obj
from gpu_serving.triton import POD_HASH_LABEL

SYNC_OPTIONS = ["CreateNamespace=true", "ServerSideApply=true"]
AUTOMATED = {"prune": True, "selfHeal": True}
# A failed sync (a webhook not up yet, a CRD still being established) is retried: 10 s, 20 s,
# 40 s... up to 5 minutes apart, five times, instead of waiting for the next git change.
# The key Argo Rollouts adds to the track Services' selectors (a JSON pointer: nothing to escape).
POD_HASH_SELECTOR = f"/spec/selector/{POD_HASH_LABEL}"
RETRY = {"limit": 5, "backoff": {"duration": "10s", "factor": 2, "maxDuration": "5m"}}


def serving_path(env: str) -> str:
    return f"deploy/serving/{env}"


def addons_path(inventory: str) -> str:
    """The add-ons are rendered per inventory (lab, staging, prod), not per stack."""
    return f"deploy/addons/{inventory}"


def _application(name: str, project: str, wave: int, source: dict[str, Any], namespace: str, **extra: Any) -> Obj:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {
            "name": name,
            "namespace": ARGOCD_NAMESPACE,
            "labels": {"app.kubernetes.io/part-of": "gpu-serving"},
            "annotations": {WAVE: str(wave)},
            "finalizers": ["resources-finalizer.argocd.argoproj.io"],
        },
        "spec": {
            "project": project,
            "source": source,
            "destination": {"server": projects.IN_CLUSTER, "namespace": namespace},
            "syncPolicy": {"automated": dict(AUTOMATED), "syncOptions": list(SYNC_OPTIONS), "retry": RETRY},
            **extra,
        },
    }


def _git(cfg: StackConfig, path: str) -> dict[str, Any]:
    return {"repoURL": cfg.git_repo_url, "targetRevision": cfg.git_revision, "path": path}


def chart_application(release: Release) -> Obj:
    source = {
        "repoURL": release.pin.repository,
        "chart": release.pin.chart,
        "targetRevision": release.pin.version,
        "helm": {"releaseName": release.name, "valuesObject": release.values},
    }
    extra = {"ignoreDifferences": list(release.ignore_differences)} if release.ignore_differences else {}
    return _application(release.name, projects.PLATFORM, release.wave, source, release.namespace, **extra)


def addons_application(cfg: StackConfig) -> Obj:
    return _application("gpu-addons", projects.ADDONS, -1, _git(cfg, addons_path(cfg.inventory)), "kube-system")


def _rollout_owned(cfg: StackConfig) -> list[Obj]:
    """What Argo Rollouts rewrites during a canary, which Argo CD must neither diff nor reset
    (a sync would otherwise undo a step): the route weights, the subsets' pod-template-hash
    labels and the track Services' selectors."""
    ns = cfg.triton.namespace
    return [
        {
            "group": "networking.istio.io",
            "kind": "VirtualService",
            "name": "triton",
            "namespace": ns,
            "jqPathExpressions": [".spec.http[].route[].weight"],
        },
        {
            "group": "networking.istio.io",
            "kind": "DestinationRule",
            "name": "triton",
            "namespace": ns,
            "jqPathExpressions": [".spec.subsets[].labels"],
        },
        *(
            {"group": "", "kind": "Service", "name": name, "namespace": ns, "jsonPointers": [POD_HASH_SELECTOR]}
            for name in (STABLE_SERVICE, CANARY_SERVICE)
        ),
    ]


def serving_application(cfg: StackConfig) -> Obj:
    # HPAs own the replicas of Triton's Rollout and of the gateway's Deployment: Argo CD must
    # neither diff nor reset them.
    app = _application(
        "gpu-serving",
        projects.SERVING,
        0,
        _git(cfg, f"{serving_path(cfg.env)}/manifests"),
        cfg.triton.namespace,
        ignoreDifferences=[
            {"group": "argoproj.io", "kind": "Rollout", "name": "triton", "jsonPointers": ["/spec/replicas"]},
            {"group": "apps", "kind": "Deployment", "name": GATEWAY, "jsonPointers": ["/spec/replicas"]},
            *_rollout_owned(cfg),
        ],
    )
    app["spec"]["syncPolicy"]["syncOptions"].append("RespectIgnoreDifferences=true")
    return app


def child_applications(cfg: StackConfig) -> list[Obj]:
    """What deploy/serving/<env>/apps holds: the charts, the add-ons and the serving manifests."""
    return [*map(chart_application, synced_releases(cfg)), addons_application(cfg), serving_application(cfg)]


def root_application(cfg: StackConfig) -> Obj:
    """The app-of-apps: syncs the Applications in deploy/serving/<env>/apps."""
    return _application(
        "gpu-serving-root", projects.BOOTSTRAP, 0, _git(cfg, f"{serving_path(cfg.env)}/apps"), ARGOCD_NAMESPACE
    )
