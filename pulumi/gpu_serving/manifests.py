"""Kubernetes objects of the serving stack, built once as plain dicts, and the helpers the other
builders share (Triton's objects: triton.py; the gateway's: serving_layer.py).

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
from monitoring.spec import with_runbook

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


def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "gpu-serving"}


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


def http_probe(path: str, period: int, failures: int, timeout: int) -> Obj:
    """A probe on the container port named `http`."""
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": failures,
    }


def triton_host(triton: Triton) -> str:
    return f"triton.{triton.namespace}.svc.cluster.local"


def namespace(name: str, *, mesh: bool) -> Obj:
    labels = _labels(name)
    if mesh:
        labels["istio-injection"] = "enabled"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(name, None, labels, **{WAVE: "-1"})}


def principal(cfg: StackConfig, service_account: str) -> str:
    """The Istio identity (SPIFFE, without the scheme) of a service account of the serving namespace."""
    return f"cluster.local/ns/{cfg.triton.namespace}/sa/{service_account}"


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
            "spec": with_runbook(monitoring_rules.rule_document(), cfg.monitoring.runbook_url),
        }
    )
    return objects
