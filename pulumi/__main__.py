"""`pulumi up -s <env>`: the stack config is read and checked once, then the components are wired,
all on the one Kubernetes provider of the stack's `gpu-serving:kubernetes`.

delivery `pulumi`: Pulumi installs every component and Argo CD syncs only the add-ons.
delivery `argocd`: Pulumi installs Argo CD, the Grafana admin Secret, the Alertmanager
receivers' Secret and the app-of-apps;
Argo CD syncs everything else from the rendered deploy/serving/<env>/ in git.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_serving, beside this file
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # platform_matrix, at the repo root

from gpu_serving import gitops, serving_layer
from gpu_serving.components import (
    AlertReceivers,
    ArgoCD,
    ArgoRollouts,
    Gateway,
    GrafanaAdmin,
    Istio,
    Monitoring,
    Triton,
    cluster_provider,
)
from gpu_serving.config import from_pulumi

import pulumi

cfg, secrets = from_pulumi()
provider = cluster_provider(cfg)


def on_cluster(*depends_on: pulumi.Resource) -> pulumi.ResourceOptions:
    """A component's options: the stack's provider, which every resource under it inherits."""
    return pulumi.ResourceOptions(providers=[provider], depends_on=list(depends_on))


if cfg.delivery == "pulumi":
    istio = Istio("istio", cfg, on_cluster())
    monitoring = Monitoring("monitoring", cfg, secrets, on_cluster())
    # The controller's ServiceMonitor needs the operator CRDs of kube-prometheus-stack.
    rollouts = ArgoRollouts("argo-rollouts", cfg, on_cluster(monitoring.stack))
    # Sidecar injection needs istiod, the ServiceMonitor the operator CRDs, the Rollout and its
    # AnalysisTemplates the Argo Rollouts CRDs.
    triton = Triton("triton", cfg, on_cluster(istio.istiod, monitoring.stack, rollouts.chart))
    istio.route(cfg, triton)
    gateway = Gateway("gateway", cfg, on_cluster(triton))
    istio.route_gateway(cfg, gateway)
    ArgoCD("argocd", cfg, [gitops.addons_application(cfg)], on_cluster())
else:
    admin = GrafanaAdmin("grafana-admin", cfg, secrets.grafana_admin_password, on_cluster())
    AlertReceivers("alert-receivers", cfg, secrets.receiver_urls, admin.namespace, on_cluster())
    ArgoCD("argocd", cfg, [gitops.root_application(cfg)], on_cluster())

pulumi.export("tritonService", f"{cfg.triton.namespace}/triton")
pulumi.export("tritonImage", cfg.triton.image)
pulumi.export("gatewayURL", serving_layer.gateway_url(cfg))
pulumi.export("gatewayImage", cfg.gateway.image.ref)
pulumi.export("driftAgentImage", cfg.drift_agent.image.ref)
