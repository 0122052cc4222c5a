"""Pulumi components: each registers the dicts of gpu_serving.manifests / charts / gitops."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi_kubernetes as k8s

import pulumi
from gpu_serving import charts, manifests, projects, serving_layer
from gpu_serving.config import Secrets, StackConfig
from gpu_serving.manifests import Obj
from gpu_serving.triton import triton_objects, triton_routing_objects
from monitoring.alerting import RECEIVERS_SECRET

TYPE = "gpu-serving:serving"


def cluster_provider(cfg: StackConfig) -> k8s.Provider:
    """The stack's one Kubernetes provider: the context, cluster and kubeconfig of
    `gpu-serving:kubernetes` (checked against the kubeconfig by config.from_pulumi). Give it to
    every component (`ResourceOptions(providers=[...])`); their children inherit it."""
    kube = cfg.kubernetes
    return k8s.Provider(
        "cluster",
        context=kube.context,
        cluster=kube.cluster,
        kubeconfig=str(kube.kubeconfig) if kube.kubeconfig else None,
    )


def _chart(
    release: charts.Release, parent: pulumi.Resource, depends_on: Sequence[pulumi.Resource] = ()
) -> k8s.helm.v4.Chart:
    pin = release.pin
    return k8s.helm.v4.Chart(
        release.name,
        name=release.name,
        chart=pin.chart,
        version=pin.version,
        namespace=release.namespace,
        repository_opts=k8s.helm.v4.RepositoryOptsArgs(repo=pin.repository),
        values=release.values,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
    )


def _namespace(name: str, parent: pulumi.Resource) -> k8s.core.v1.Namespace:
    """The namespace a chart installs into: Pulumi's Chart (as `helm template`) creates none."""
    return k8s.core.v1.Namespace(name, metadata={"name": name}, opts=pulumi.ResourceOptions(parent=parent))


def _objects(
    name: str, objs: list[Obj], parent: pulumi.Resource, depends_on: Sequence[pulumi.Resource] = ()
) -> k8s.yaml.v2.ConfigGroup:
    return k8s.yaml.v2.ConfigGroup(
        name, objs=objs, opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on))
    )


class ArgoRollouts(pulumi.ComponentResource):
    """The Argo Rollouts controller and CRDs, which Triton's Rollout and AnalysisTemplates need."""

    def __init__(self, name: str, cfg: StackConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{TYPE}:ArgoRollouts", name, None, opts)
        release = charts.argo_rollouts(cfg)
        self.chart = _chart(release, self, [_namespace(release.namespace, self)])
        self.register_outputs({})


class Triton(pulumi.ComponentResource):
    """Triton's namespace, PriorityClass, Rollout, Services, PDB, HPA, ServiceMonitor and the
    AnalysisTemplates of its canary (triton.py)."""

    def __init__(self, name: str, cfg: StackConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{TYPE}:Triton", name, None, opts)
        self.objects = _objects(f"{name}-objects", triton_objects(cfg), self)
        self.register_outputs({"namespace": cfg.triton.namespace})


class Gateway(pulumi.ComponentResource):
    """The inference gateway in front of Triton (Deployment on CPU nodes, Service, PDB, HPA on
    CPU, NetworkPolicy, ServiceMonitor) and the drift agent that samples it."""

    def __init__(self, name: str, cfg: StackConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{TYPE}:Gateway", name, None, opts)
        self.gateway = _objects(f"{name}-objects", serving_layer.gateway_objects(cfg), self)
        self.drift_agent = _objects(f"{name}-drift-agent", serving_layer.drift_agent_objects(cfg), self)
        self.register_outputs({"url": serving_layer.gateway_url(cfg)})


class GrafanaAdmin(pulumi.ComponentResource):
    """The monitoring namespace and the Secret that Grafana's admin.existingSecret names,
    holding the stack's secret `grafanaAdminPassword`."""

    def __init__(
        self, name: str, cfg: StackConfig, password: pulumi.Output[str], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(f"{TYPE}:GrafanaAdmin", name, None, opts)
        ns = cfg.monitoring.namespace
        self.namespace = k8s.core.v1.Namespace(ns, metadata={"name": ns}, opts=pulumi.ResourceOptions(parent=self))
        self.secret = k8s.core.v1.Secret(
            manifests.GRAFANA_ADMIN_SECRET,
            metadata={"name": manifests.GRAFANA_ADMIN_SECRET, "namespace": ns},
            type="Opaque",
            string_data={"admin-user": "admin", "admin-password": pulumi.Output.secret(password)},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.namespace]),
        )
        self.register_outputs({})


class AlertReceivers(pulumi.ComponentResource):
    """The Secret that kube-prometheus-stack's Alertmanager mounts (alertmanagerSpec.secrets):
    one key per receiver of monitoring/alertmanager.yml, its URL from the stack's secret
    alertReceiver<Key>. Git holds only the file names."""

    def __init__(
        self,
        name: str,
        cfg: StackConfig,
        urls: Mapping[str, pulumi.Output[str]],
        namespace: k8s.core.v1.Namespace,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{TYPE}:AlertReceivers", name, None, opts)
        self.secret = k8s.core.v1.Secret(
            RECEIVERS_SECRET,
            metadata={"name": RECEIVERS_SECRET, "namespace": cfg.monitoring.namespace},
            type="Opaque",
            string_data={key: pulumi.Output.secret(url) for key, url in urls.items()},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[namespace]),
        )
        self.register_outputs({})


class Monitoring(pulumi.ComponentResource):
    """kube-prometheus-stack with Grafana and its dashboard sidecar, prometheus-adapter for
    the HPA's queue-time metric, the dashboards and the PrometheusRule of monitoring/."""

    def __init__(
        self, name: str, cfg: StackConfig, secrets: Secrets, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(f"{TYPE}:Monitoring", name, None, opts)
        self.admin = GrafanaAdmin(
            f"{name}-grafana-admin", cfg, secrets.grafana_admin_password, pulumi.ResourceOptions(parent=self)
        )
        receivers = f"{name}-alert-receivers"
        self.receivers = AlertReceivers(
            receivers, cfg, secrets.receiver_urls, self.admin.namespace, pulumi.ResourceOptions(parent=self)
        )
        self.stack = _chart(charts.kube_prometheus_stack(cfg), self, [self.admin, self.receivers])
        self.adapter = _chart(charts.prometheus_adapter(cfg), self, [self.stack])
        self.dashboards = _objects(f"{name}-dashboards", manifests.monitoring_objects(cfg), self, [self.admin])
        self.register_outputs({})


class Istio(pulumi.ComponentResource):
    """istio-base, istiod and the ingress gateway, mesh-wide STRICT mTLS, (route()) Triton's
    canary routing and (route_gateway()) the gateway's."""

    def __init__(self, name: str, cfg: StackConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{TYPE}:Istio", name, None, opts)
        self.name = name
        base = charts.istio_base(cfg)
        self.base = _chart(base, self, [_namespace(base.namespace, self)])
        self.istiod = _chart(charts.istiod(cfg), self, [self.base])
        self.ingress = _chart(charts.istio_gateway(cfg), self, [self.istiod])
        self.mesh = _objects(f"{name}-mesh", manifests.mesh_objects(), self, [self.istiod])
        self.register_outputs({})

    def route(self, cfg: StackConfig, triton: Triton) -> k8s.yaml.v2.ConfigGroup:
        """Triton's DestinationRule, the VirtualService the Rollout weighs and the
        AuthorizationPolicy (the gateway and the golden-set Job only), once its namespace exists."""
        return _objects(f"{self.name}-triton-routing", triton_routing_objects(cfg), self, [triton])

    def route_gateway(self, cfg: StackConfig, gateway: Gateway) -> k8s.yaml.v2.ConfigGroup:
        """The gateway's VirtualService, and the plaintext metrics ports and AuthorizationPolicies
        of the gateway and the drift agent."""
        return _objects(f"{self.name}-gateway-routing", serving_layer.routing_objects(cfg), self, [gateway])


class ArgoCD(pulumi.ComponentResource):
    """The Argo CD chart, the AppProjects (projects.py) and the Applications that Argo CD then
    syncs from git; every Application waits for the projects."""

    def __init__(
        self, name: str, cfg: StackConfig, applications: list[Obj], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(f"{TYPE}:ArgoCD", name, None, opts)
        release = charts.argo_cd(cfg)
        self.chart = _chart(release, self, [_namespace(release.namespace, self)])
        self.projects = [self._custom(project, [self.chart]) for project in projects.app_projects(cfg)]
        self.applications = [self._custom(app, [self.chart, *self.projects]) for app in applications]
        self.register_outputs({"applications": [app["metadata"]["name"] for app in applications]})

    def _custom(self, obj: Obj, depends_on: list[pulumi.Resource]) -> k8s.apiextensions.CustomResource:
        # Named as before the projects existed: a renamed Application would be replaced, and
        # deleting it (resources finalizer) deletes what it synced. URNs differ by type.
        return k8s.apiextensions.CustomResource(
            obj["metadata"]["name"],
            api_version=obj["apiVersion"],
            kind=obj["kind"],
            metadata=obj["metadata"],
            spec=obj["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on),
        )
