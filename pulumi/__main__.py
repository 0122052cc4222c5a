"""`pulumi up -s <env>`: the stack config is read and checked once, then the components are wired.

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
)
from gpu_serving.config import from_pulumi

import pulumi

cfg, secrets = from_pulumi()

if cfg.delivery == "pulumi":
    istio = Istio("istio", cfg)
    monitoring = Monitoring("monitoring", cfg, secrets)
    # The controller's ServiceMonitor needs the operator CRDs of kube-prometheus-stack.
    rollouts = ArgoRollouts("argo-rollouts", cfg, pulumi.ResourceOptions(depends_on=[monitoring.stack]))
    # Sidecar injection needs istiod, the ServiceMonitor the operator CRDs, the Rollout and its
    # AnalysisTemplates the Argo Rollouts CRDs.
    triton = Triton("triton", cfg, pulumi.ResourceOptions(depends_on=[istio.istiod, monitoring.stack, rollouts.chart]))
    istio.route(cfg, triton)
    gateway = Gateway("gateway", cfg, pulumi.ResourceOptions(depends_on=[triton]))
    istio.route_gateway(cfg, gateway)
    ArgoCD("argocd", cfg, [gitops.addons_application(cfg)])
else:
    admin = GrafanaAdmin("grafana-admin", cfg, secrets.grafana_admin_password)
    AlertReceivers("alert-receivers", cfg, secrets.receiver_urls, admin.namespace)
    ArgoCD("argocd", cfg, [gitops.root_application(cfg)])

pulumi.export("tritonService", f"{cfg.triton.namespace}/triton")
pulumi.export("tritonImage", cfg.triton.image)
pulumi.export("gatewayURL", serving_layer.gateway_url(cfg))
pulumi.export("gatewayImage", cfg.gateway.image.ref)
pulumi.export("driftAgentImage", cfg.drift_agent.image.ref)
