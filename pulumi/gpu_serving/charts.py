"""The Helm charts of the stack and their values, built once for Pulumi's Chart and Argo CD.

A release is a chart pin from the platform matrix, a namespace and values. Pulumi installs it
with kubernetes.helm.v4.Chart; the renderer writes an Argo CD Application with the same repo,
version and values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpu_serving.config import ChartPin, Resources, StackConfig
from gpu_serving.manifests import GRAFANA_ADMIN_SECRET, ISTIO_NAMESPACE, QUEUE_METRIC
from monitoring.alerting import RECEIVERS_SECRET
from monitoring.rules import POD_QUEUE_TIME
from monitoring.spec import HEARTBEAT_ALERT

PROMETHEUS_NAME = "kps"  # fullnameOverride: the Prometheus service is kps-prometheus


@dataclass(frozen=True)
class Release:
    name: str
    pin: ChartPin
    namespace: str
    values: dict[str, Any]
    wave: int
    # Fields the cluster rewrites after install, which Argo CD must not report as drift.
    ignore_differences: tuple[dict[str, Any], ...] = ()


def _resources(resources: Resources) -> dict[str, dict[str, str]]:
    return {"requests": dict(resources.requests), "limits": dict(resources.limits)}


def kube_prometheus_stack(cfg: StackConfig) -> Release:
    monitoring = cfg.monitoring
    return Release(
        name="kube-prometheus-stack",
        pin=cfg.chart("kube-prometheus-stack"),
        namespace=monitoring.namespace,
        wave=-2,
        values={
            "fullnameOverride": PROMETHEUS_NAME,
            # The chart's own Watchdog is off: monitoring/rules.py has the one heartbeat.
            "defaultRules": {"disabled": {HEARTBEAT_ALERT: True}},
            # monitoring/alertmanager.yml as it is: its receivers read their URLs from the files
            # of the Secret RECEIVERS_SECRET (made by Pulumi from the stack's secrets), which the
            # operator mounts under /etc/alertmanager/secrets/.
            "alertmanager": {
                "config": dict(monitoring.alertmanager),
                "alertmanagerSpec": {"secrets": [RECEIVERS_SECRET]},
            },
            "prometheus": {
                "prometheusSpec": {
                    "retention": monitoring.retention,
                    # Alertmanager groups and inhibits by cluster (monitoring/alertmanager.yml).
                    "externalLabels": {"cluster": cfg.env},
                    "resources": _resources(monitoring.prometheus_resources),
                    # Select every ServiceMonitor, not only those labelled with this release.
                    "serviceMonitorSelectorNilUsesHelmValues": False,
                    "serviceMonitorSelector": {},
                    "serviceMonitorNamespaceSelector": {},
                    "podMonitorSelectorNilUsesHelmValues": False,
                    "ruleSelectorNilUsesHelmValues": False,
                }
            },
            "grafana": {
                "admin": {
                    "existingSecret": GRAFANA_ADMIN_SECRET,
                    "userKey": "admin-user",
                    "passwordKey": "admin-password",
                },
                "resources": _resources(monitoring.grafana_resources),
                "sidecar": {
                    "dashboards": {
                        "enabled": True,
                        "label": "grafana_dashboard",
                        "labelValue": "1",
                        "searchNamespace": "ALL",
                    }
                },
            },
        },
    )


def prometheus_adapter(cfg: StackConfig) -> Release:
    """Serves Triton's mean queue time per request to the HPA as a pods metric: the recording
    rule of monitoring/rules.py, right at any request rate (0 while a pod gets no requests)."""
    return Release(
        name="prometheus-adapter",
        pin=cfg.chart("prometheus-adapter"),
        namespace=cfg.monitoring.namespace,
        wave=-1,
        values={
            "prometheus": {"url": f"http://{PROMETHEUS_NAME}-prometheus.{cfg.monitoring.namespace}.svc", "port": 9090},
            "rules": {
                "default": False,
                "custom": [
                    {
                        "seriesQuery": f'{POD_QUEUE_TIME}{{namespace!="",pod!=""}}',
                        "resources": {
                            "overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
                        },
                        "name": {"matches": f"^{POD_QUEUE_TIME}$", "as": QUEUE_METRIC},
                        "metricsQuery": "max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
                    }
                ],
            },
        },
    )


def istio_base(cfg: StackConfig) -> Release:
    # istiod sets the failurePolicy of the validating webhook itself once it serves it.
    webhook = {
        "group": "admissionregistration.k8s.io",
        "kind": "ValidatingWebhookConfiguration",
        "name": "istiod-default-validator",
        "jsonPointers": ["/webhooks/0/failurePolicy"],
    }
    return Release(
        "istio-base",
        cfg.chart("istio-base"),
        ISTIO_NAMESPACE,
        {"defaultRevision": "default"},
        wave=-3,
        ignore_differences=(webhook,),
    )


def istiod(cfg: StackConfig) -> Release:
    return Release(
        "istiod",
        cfg.chart("istiod"),
        ISTIO_NAMESPACE,
        {"meshConfig": {"accessLogFile": "/dev/stdout"}, "pilot": {"autoscaleEnabled": True}},
        wave=-2,
    )


# Argo CD has not assessed the health of Application objects since 1.8: without this check a
# child Application counts as healthy as soon as it exists, and the app-of-apps' sync waves
# (charts, then add-ons, then serving) do not wait for one another. The child's own health
# (status.health) becomes the object's; no status yet is Progressing, never Healthy.
APPLICATION_HEALTH_LUA = """\
hs = {status = "Progressing", message = "waiting for the Application's first health assessment"}
if obj.status ~= nil and obj.status.health ~= nil and obj.status.health.status ~= nil then
  hs.status = obj.status.health.status
  hs.message = obj.status.health.message or ""
end
return hs
"""


def argo_cd(cfg: StackConfig) -> Release:
    cm = {
        "application.resourceTrackingMethod": "annotation",
        "resource.customizations.health.argoproj.io_Application": APPLICATION_HEALTH_LUA,
    }
    return Release(
        "argo-cd", cfg.chart("argo-cd"), "argocd", {"dex": {"enabled": False}, "configs": {"cm": cm}}, wave=-4
    )


INGRESS_GATEWAY = "istio-ingressgateway"  # the release; the chart labels its pods istio: ingressgateway


def istio_gateway(cfg: StackConfig) -> Release:
    """The ingress gateway (Envoy at the mesh edge) in istio-system, which the gateway's
    NetworkPolicy already admits; serving_layer routes it to the inference gateway. At least two
    replicas and a PDB: the edge never goes down for a node drain."""
    values = {
        "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 6},
        "podDisruptionBudget": {"minAvailable": 1},
    }
    return Release(INGRESS_GATEWAY, cfg.chart("istio-gateway"), ISTIO_NAMESPACE, values, wave=-1)


ROLLOUTS_NAMESPACE = "argo-rollouts"


def argo_rollouts(cfg: StackConfig) -> Release:
    """The Argo Rollouts controller and its CRDs (Rollout, AnalysisTemplate, AnalysisRun...), a
    wave before the serving manifests that use them. Two controller replicas (leader election),
    its metrics scraped by the stack's Prometheus (hence a wave after kube-prometheus-stack)."""
    values = {
        "installCRDs": True,
        "keepCRDs": True,
        "controller": {"replicas": 2, "metrics": {"enabled": True, "serviceMonitor": {"enabled": True}}},
        "dashboard": {"enabled": False},
    }
    return Release("argo-rollouts", cfg.chart("argo-rollouts"), ROLLOUTS_NAMESPACE, values, wave=-1)


def synced_releases(cfg: StackConfig) -> list[Release]:
    """The charts Argo CD installs from deploy/serving/<env>/apps (Argo CD itself comes from Pulumi)."""
    return [
        istio_base(cfg),
        istiod(cfg),
        istio_gateway(cfg),
        kube_prometheus_stack(cfg),
        prometheus_adapter(cfg),
        argo_rollouts(cfg),
    ]
