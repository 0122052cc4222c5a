"""`make render ENV=<env>`: write the stack's objects as YAML for Argo CD to sync from git.

deploy/serving/<env>/
  root.yaml      the app-of-apps; Pulumi creates it (delivery argocd), or `kubectl apply -f` it
  projects/      the AppProjects every Application names; Pulumi creates them with Argo CD, or
                 `kubectl apply -f` them before root.yaml
  apps/          Applications: the pinned charts with their values, the add-ons, the manifests
  manifests/     Triton (its Rollout and AnalysisTemplates), the gateway and drift agent, Istio
                 routing, mTLS and authorization,
                 the Grafana dashboards and the PrometheusRule (monitoring/)

Helm charts are not templated here (no helm, no network): their Applications carry the
chart's repository, pinned version and values, so Argo CD installs what Pulumi would.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gpu_serving import gitops, manifests, projects, serving_layer, triton
from gpu_serving.config import ConfigError, StackConfig, from_stack_file
from gpu_serving.fleet import FleetError
from gpu_serving.manifests import Obj
from monitoring.build import to_yaml as yaml_text

HEADER = "# Rendered by `make render ENV={env}` from pulumi/Pulumi.{env}.yaml: edit those, not this file.\n"


def to_yaml(obj: Any) -> str:
    return yaml_text(obj, width=110)


def served_objects(cfg: StackConfig) -> list[Obj]:
    """What the gpu-serving Application syncs (deploy/serving/<env>/manifests)."""
    return [
        *triton.triton_objects(cfg),
        *serving_layer.gateway_objects(cfg),
        *serving_layer.drift_agent_objects(cfg),
        *manifests.mesh_objects(),
        *triton.triton_routing_objects(cfg),
        *serving_layer.routing_objects(cfg),
        *manifests.monitoring_objects(cfg),
    ]


def render(cfg: StackConfig) -> dict[str, str]:
    """Relative path -> file text, for every file of deploy/serving/<env>/."""
    header = HEADER.format(env=cfg.env)
    files = {"root.yaml": header + to_yaml(gitops.root_application(cfg))}
    for project in projects.app_projects(cfg):
        files[f"projects/{project['metadata']['name']}.yaml"] = header + to_yaml(project)
    for app in gitops.child_applications(cfg):
        files[f"apps/{app['metadata']['name']}.yaml"] = header + to_yaml(app)
    for index, obj in enumerate(served_objects(cfg)):
        name = f"manifests/{index:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        files[name] = header + to_yaml(obj)
    return files


def write(files: dict[str, str], out: Path) -> None:
    """Replace out/ with exactly `files` (a stale file of a removed object would be synced)."""
    for stale in sorted(out.rglob("*.yaml")) if out.exists() else []:
        if stale.relative_to(out).as_posix() not in files:
            stale.unlink()
    for relative, text in files.items():
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True, help="stack name: reads pulumi/Pulumi.<env>.yaml")
    parser.add_argument("--out", type=Path, required=True, help="output folder, e.g. deploy/serving/prod")
    args = parser.parse_args(argv)
    try:
        cfg = from_stack_file(args.env)
    except (ConfigError, FleetError) as exc:
        print(f"render: {exc}", file=sys.stderr)
        return 2
    files = render(cfg)
    write(files, args.out)
    print(f"render: wrote {len(files)} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
