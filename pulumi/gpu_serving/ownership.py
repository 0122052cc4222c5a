"""One owner per Kubernetes object: who applies each object of an environment, and a refusal of
any object that two owners (or two files of one) claim.

An environment (a stack, `pulumi/Pulumi.<env>.yaml`) has two kinds of owner:

- Pulumi: what `pulumi/__main__.py` registers for the stack's delivery, component by component
  (delivery `pulumi`: every component; delivery `argocd`: Argo CD, its AppProjects, the Grafana
  admin Secret, the Alertmanager receivers' Secret and the app-of-apps).
- Argo CD: every Application that Pulumi registers, and every Application those sync in turn,
  owns what its source holds: a folder of this repository (`deploy/addons/<inventory>`,
  `deploy/serving/<env>/apps`, `deploy/serving/<env>/manifests`), read as Argo CD reads a
  directory source, or a chart release.

An object is its API group, kind, namespace and name (not its version). A chart's objects are
not known without helm: its release (namespace and release name) stands for all of them. Argo
CD's `CreateNamespace=true` creates a missing destination namespace without tracking it, so it
owns that namespace only with `managedNamespaceMetadata`. Files of deploy/ that no Application
syncs own nothing: `deploy/serving/<env>/root.yaml` and `projects/` (Pulumi creates those
objects), and the whole `deploy/serving/<env>/` of a stack with delivery `pulumi`.

    python -m gpu_serving.ownership check                      # every stack
    python -m gpu_serving.ownership check --env prod
    python -m gpu_serving.ownership check --source deploy/addons/prod=<dir>   # <dir> in its place

`--source` reads a folder in place of one of this repository's (a fresh render, before it
replaces the committed one). A refusal names the object and both of its owners with their files
(or the Pulumi component); it writes nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpu_serving import charts, gitops, manifests, projects, serving_layer, triton
from gpu_serving.config import PULUMI_DIR, ConfigError, StackConfig, from_stack_file, shown_path, stack_names
from gpu_serving.fleet import FleetError
from gpu_serving.manifests import Obj
from monitoring.alerting import RECEIVERS_SECRET

REPO_ROOT = PULUMI_DIR.parent
COMPONENTS = "pulumi/gpu_serving/components.py"
# Kinds without a namespace: those the AppProjects admit (projects.py); Argo CD refuses any other.
CLUSTER_KINDS = frozenset(
    (*projects.CHART_CLUSTER_KINDS, *projects.ADDONS_CLUSTER_KINDS, *projects.SERVING_CLUSTER_KINDS)
)
# What stands for the objects of a chart release, which are not known without helm.
CHART_RELEASE = ("helm.sh", "release")
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


class OwnershipError(ValueError):
    """A source that cannot be read, so its objects cannot be known; names the file and key."""


@dataclass(frozen=True, order=True)
class Identity:
    group: str  # "" for the core group
    kind: str
    namespace: str  # "" for a cluster-scoped kind
    name: str

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        if (self.group, self.kind) == CHART_RELEASE:
            return f"Helm release {where} (every object of the chart)"
        return f"{self.kind} {where}" + (f" ({self.group})" if self.group else "")


@dataclass(frozen=True)
class Claim:
    identity: Identity
    owner: str  # "Argo CD Application gpu-addons", "Pulumi component Triton"
    where: str  # the file that holds the object, or the Pulumi component's module

    def __str__(self) -> str:
        return f"{self.owner} ({self.where})"


def identity(obj: Mapping[str, Any], default_namespace: str) -> Identity:
    """A manifest's identity; a namespaced object without a namespace lands in `default_namespace`."""
    api_version = str(obj.get("apiVersion", ""))
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    kind = str(obj.get("kind", ""))
    metadata = obj.get("metadata") or {}
    namespace = "" if (group, kind) in CLUSTER_KINDS else str(metadata.get("namespace") or default_namespace)
    return Identity(group, kind, namespace, str(metadata.get("name", "")))


def _release(release: charts.Release) -> Identity:
    return Identity(*CHART_RELEASE, release.namespace, release.name)


def _namespace(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _secret(name: str, namespace: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace}}


def pulumi_registered(cfg: StackConfig) -> dict[str, tuple[list[Obj], list[charts.Release]]]:
    """Component name -> the objects and chart releases it registers, as pulumi/__main__.py wires
    the components for the stack's delivery (tests/pulumi/test_ownership.py runs the program under
    mocks and compares)."""
    ns = cfg.monitoring.namespace
    secrets: dict[str, tuple[list[Obj], list[charts.Release]]] = {
        "GrafanaAdmin": ([_namespace(ns), _secret(manifests.GRAFANA_ADMIN_SECRET, ns)], []),
        "AlertReceivers": ([_secret(RECEIVERS_SECRET, ns)], []),
    }
    argo_cd = charts.argo_cd(cfg)
    argocd = [_namespace(argo_cd.namespace), *projects.app_projects(cfg)]
    if cfg.delivery != "pulumi":
        return {**secrets, "ArgoCD": ([*argocd, gitops.root_application(cfg)], [argo_cd])}
    istio_base, rollouts = charts.istio_base(cfg), charts.argo_rollouts(cfg)
    return {
        "Istio": (
            [
                _namespace(istio_base.namespace),
                *manifests.mesh_objects(),
                *triton.triton_routing_objects(cfg),
                *serving_layer.routing_objects(cfg),
            ],
            [istio_base, charts.istiod(cfg), charts.istio_gateway(cfg)],
        ),
        "Monitoring": (
            manifests.monitoring_objects(cfg),
            [charts.kube_prometheus_stack(cfg), charts.prometheus_adapter(cfg)],
        ),
        **secrets,
        "ArgoRollouts": ([_namespace(rollouts.namespace)], [rollouts]),
        "Triton": (triton.triton_objects(cfg), []),
        "Gateway": ([*serving_layer.gateway_objects(cfg), *serving_layer.drift_agent_objects(cfg)], []),
        "ArgoCD": ([*argocd, gitops.addons_application(cfg)], [argo_cd]),
    }


class _Sources:
    """This repository's folders as Argo CD reads them, with `overrides` (repo-relative folder ->
    folder read in its place)."""

    def __init__(self, cfg: StackConfig, overrides: Mapping[str, Path]) -> None:
        self.cfg = cfg
        self.overrides = {folder.strip("/"): path for folder, path in overrides.items()}

    def documents(self, folder: str, recurse: bool, source: str) -> Iterator[tuple[str, Obj]]:
        """(file, document) of every manifest of `folder`; `source` names the Application's key."""
        relative = folder.strip("/")
        root = self.overrides.get(relative, REPO_ROOT / relative)
        files = sorted(root.rglob("*") if recurse else root.glob("*")) if root.is_dir() else []
        files = [path for path in files if path.is_file() and path.suffix in MANIFEST_SUFFIXES]
        if not files:
            raise OwnershipError(f"{source}: {relative} holds no manifests, so what it syncs cannot be known")
        for path in files:
            try:
                documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
            except yaml.YAMLError as exc:
                raise OwnershipError(f"{shown_path(path)}: not YAML: {exc}") from exc
            for document in documents:
                if document is None:
                    continue
                if not isinstance(document, dict) or not (document.get("metadata") or {}).get("name"):
                    raise OwnershipError(f"{shown_path(path)}: a document without kind and metadata.name")
                yield shown_path(path), document

    def application_claims(self, app: Obj, where: str, seen: set[Identity]) -> Iterator[Claim]:
        """What Application `app` (held by `where`) syncs, and what the Applications among that sync."""
        own = identity(app, manifests.ARGOCD_NAMESPACE)
        if own in seen:
            return
        seen.add(own)
        spec = app.get("spec") or {}
        owner = f"Argo CD Application {own.name}"
        destination = str((spec.get("destination") or {}).get("namespace") or "default")
        sync = spec.get("syncPolicy") or {}
        if "CreateNamespace=true" in (sync.get("syncOptions") or []) and sync.get("managedNamespaceMetadata"):
            yield Claim(identity(_namespace(destination), destination), owner, where)
        sources = [("spec.source", spec["source"])] if "source" in spec else []
        sources += [(f"spec.sources[{index}]", source) for index, source in enumerate(spec.get("sources") or [])]
        for key, source in sources:
            if "chart" in source:
                release = (source.get("helm") or {}).get("releaseName") or own.name
                yield Claim(Identity(*CHART_RELEASE, destination, str(release)), owner, where)
                continue
            if source.get("repoURL") != self.cfg.git_repo_url:
                raise OwnershipError(
                    f"{where}: {key}.repoURL: {source.get('repoURL')!r} is not the stack's gitRepoURL "
                    f"({self.cfg.git_repo_url}), so what it syncs cannot be read here"
                )
            recurse = bool((source.get("directory") or {}).get("recurse"))
            for path, document in self.documents(str(source.get("path", "")), recurse, f"{where}: {key}.path"):
                claim = Claim(identity(document, destination), owner, path)
                yield claim
                if (claim.identity.group, claim.identity.kind) == ("argoproj.io", "Application"):
                    yield from self.application_claims(document, path, seen)


def claims(cfg: StackConfig, overrides: Mapping[str, Path] | None = None) -> list[Claim]:
    """Every object the stack's owners apply: Pulumi's components, then the Applications among
    them, followed through git."""
    sources = _Sources(cfg, overrides or {})
    found: list[Claim] = []
    applications: list[tuple[Obj, str]] = []
    for component, (objs, releases) in pulumi_registered(cfg).items():
        owner = f"Pulumi component {component}"
        for obj in objs:
            claim = Claim(identity(obj, "default"), owner, COMPONENTS)
            found.append(claim)
            if (claim.identity.group, claim.identity.kind) == ("argoproj.io", "Application"):
                applications.append((obj, f"{owner} ({COMPONENTS})"))
        found += [Claim(_release(release), owner, COMPONENTS) for release in releases]
    seen: set[Identity] = set()
    for app, where in applications:
        found += sources.application_claims(app, where, seen)
    return found


def doubled(found: Sequence[Claim]) -> list[str]:
    """One line per object claimed more than once, naming the object and every claim."""
    by_identity: dict[Identity, list[Claim]] = defaultdict(list)
    for claim in found:
        by_identity[claim.identity].append(claim)
    problems = []
    for ident, twice in sorted(by_identity.items()):
        if len(twice) > 1:
            verb = "owned twice" if len({claim.owner for claim in twice}) > 1 else "defined twice"
            problems.append(f"{ident}: {verb}, by " + " and by ".join(map(str, twice)))
    return problems


def _override(text: str) -> tuple[str, Path]:
    folder, sep, path = text.partition("=")
    if not sep or not folder or not path:
        raise argparse.ArgumentTypeError(f"expected FOLDER=DIR (deploy/addons/prod=/tmp/render), got {text!r}")
    return folder.strip("/"), Path(path).resolve()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_serving.ownership", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser("check", help="refuse any object with two owners, in every stack or --env")
    command.add_argument("--env", action="append", help="a stack (pulumi/Pulumi.<env>.yaml); default: every one")
    command.add_argument(
        "--source", action="append", type=_override, default=[], help="FOLDER=DIR: read DIR in place of FOLDER"
    )
    args = parser.parse_args(argv)
    overrides = dict(args.source)
    failed = False
    for env in args.env or stack_names():
        try:
            cfg = from_stack_file(env)
            found = claims(cfg, overrides)
        except (ConfigError, FleetError, OwnershipError) as exc:
            print(f"ownership: {exc}", file=sys.stderr)
            failed = True
            continue
        problems = [f"{cfg.source}: {problem}" for problem in doubled(found)]
        for problem in problems:
            print(f"ownership: {problem}", file=sys.stderr)
        failed = failed or bool(problems)
        if not problems:
            print(f"ownership: {env}: {len(found)} objects, one owner each")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
