"""One owner per object (gpu_serving.ownership): in every committed stack, no Kubernetes object is
applied by two owners; Pulumi's part of the model is what pulumi/__main__.py registers under mocks;
an add-on that a second owner also applies is refused, naming the object and both files, and
nothing is written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from gpu_serving import ownership
from gpu_serving.config import from_stack_file, stack_names
from gpu_serving.ownership import Identity, OwnershipError, claims, doubled, identity

import pulumi
from tests.k8s_addons.addon_render import render
from tests.pulumi.pulumi_mocks import run_program

REPO = ownership.REPO_ROOT
STACKS = stack_names()
COMPONENT = "gpu-serving:serving:"


def test_every_committed_environment_is_checked():
    """Every stack file (the examples and any new environment), each with its add-ons rendered."""
    assert {"dev", "prod", "staging"} <= set(STACKS)
    stack_files = sorted(path.name.split(".")[1] for path in (REPO / "pulumi").glob("Pulumi.*.yaml"))
    assert stack_files == STACKS
    for env in STACKS:
        inventory = from_stack_file(env).inventory
        rendered = (REPO / "deploy/addons" / inventory).is_dir()
        assert rendered, f"{env}: make render-addons INVENTORY=inventories/{inventory}"


def manifest_identities(folder: Path, default_namespace: str) -> set[Identity]:
    return {
        identity(document, default_namespace)
        for path in sorted(folder.glob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if document
    }


@pytest.mark.parametrize("env", STACKS)
def test_each_object_of_a_committed_stack_has_one_owner(env):
    cfg = from_stack_file(env)
    found = claims(cfg)
    assert doubled(found) == []
    owners: dict[Identity, str] = {claim.identity: claim.owner for claim in found}
    # Argo CD owns every add-on of the stack's inventory, in every delivery; Ansible owns none.
    addons = manifest_identities(REPO / "deploy/addons" / cfg.inventory, "kube-system")
    assert addons and {owners.get(ident) for ident in addons} == {"Argo CD Application gpu-addons"}
    serving = manifest_identities(REPO / "deploy/serving" / env / "manifests", cfg.triton.namespace)
    if cfg.delivery == "argocd":
        assert {owners.get(ident) for ident in serving} == {"Argo CD Application gpu-serving"}
        apps = manifest_identities(REPO / "deploy/serving" / env / "apps", "argocd")
        assert {owners.get(ident) for ident in apps} == {"Argo CD Application gpu-serving-root"}
    else:
        # deploy/serving/dev is rendered but synced by nobody: Pulumi applies those objects itself.
        assert {owners.get(ident) for ident in serving} == {
            "Pulumi component Triton",
            "Pulumi component Gateway",
            "Pulumi component Istio",
            "Pulumi component Monitoring",
        }
    # The monitoring namespace is Pulumi's (the Grafana admin Secret lives there); the charts'
    # Applications only create it when missing (CreateNamespace=true), without owning it.
    assert owners[Identity("", "Namespace", "", cfg.monitoring.namespace)] == "Pulumi component GrafanaAdmin"


def registered_by_the_program(env: str) -> set[tuple[str, Identity]]:
    """(component, object) for every Kubernetes object and chart the program registers under
    mocks; the component is the resource's parent, read from its URN."""
    mocks = run_program(env)
    parents = {}
    for urn in pulumi.runtime.settings.SETTINGS.monitor.resources:
        types, name = urn.split("::")[2:]
        parent, _, typ = types.rpartition("$")
        parents[typ, name] = parent.removeprefix(COMPONENT)
    found = set()
    for resource in mocks.resources:
        if resource.typ.startswith((COMPONENT, "pulumi:providers:")):
            continue
        component, inputs = parents[resource.typ, resource.name], resource.inputs
        if resource.typ == "kubernetes:yaml/v2:ConfigGroup":
            found |= {(component, identity(obj, "default")) for obj in inputs["objs"]}
        elif resource.typ == "kubernetes:helm.sh/v4:Chart":
            found.add((component, Identity(*ownership.CHART_RELEASE, inputs["namespace"], inputs["name"])))
        else:
            api_version, kind = resource.typ.removeprefix("kubernetes:").rsplit(":", 1)
            obj = {"apiVersion": api_version.removeprefix("core/"), "kind": kind, "metadata": inputs["metadata"]}
            found.add((component, identity(obj, "default")))
    return found


@pytest.mark.parametrize("env", STACKS)
def test_pulumis_part_is_what_the_program_registers(env):
    cfg = from_stack_file(env)
    modelled = {
        (claim.owner.removeprefix("Pulumi component "), claim.identity)
        for claim in claims(cfg)
        if claim.owner.startswith("Pulumi component ")
    }
    assert modelled == registered_by_the_program(env)


@pytest.mark.parametrize("env", STACKS)
def test_every_chart_that_pulumi_installs_goes_into_a_namespace_that_pulumi_creates(env):
    """Pulumi's Chart creates no namespace (as `helm template`), so on a new cluster `pulumi up`
    would fail on the first object of a chart whose namespace nobody made. What the program
    registers is the model's (the test above), so the model is asked."""
    registered = ownership.pulumi_registered(from_stack_file(env)).values()
    created = {obj["metadata"]["name"] for objs, _ in registered for obj in objs if obj["kind"] == "Namespace"}
    installed = {release.namespace for _, releases in registered for release in releases}
    assert installed <= created, f"{env}: charts installed into namespaces nobody creates: {installed - created}"


def snapshot(*folders: Path) -> dict[str, bytes]:
    return {str(path): path.read_bytes() for folder in folders for path in sorted(folder.rglob("*")) if path.is_file()}


def addons_copy(tmp_path: Path, inventory: str) -> Path:
    copy = tmp_path / "addons"
    shutil.copytree(REPO / "deploy/addons" / inventory, copy)
    return copy


def write_manifest(path: Path, obj: dict) -> None:
    path.write_text("---\n" + yaml.safe_dump(obj, sort_keys=False), encoding="utf-8")


NAMESPACE_TRITON = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "triton"}}
SERVICE_MONITOR = {
    "apiVersion": "monitoring.coreos.com/v1",
    "kind": "ServiceMonitor",
    "metadata": {"name": "triton", "namespace": "triton"},
    "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "triton"}}, "endpoints": [{"port": "metrics"}]},
}


@pytest.mark.parametrize(
    ("env", "obj", "other"),
    [
        pytest.param(
            "prod",
            NAMESPACE_TRITON,
            "Argo CD Application gpu-serving (deploy/serving/prod/manifests/00-namespace-triton.yaml)",
            id="namespace-synced-by-gpu-serving",
        ),
        pytest.param(
            "staging",
            SERVICE_MONITOR,
            "Argo CD Application gpu-serving (deploy/serving/staging/manifests/10-servicemonitor-triton.yaml)",
            id="servicemonitor-synced-by-gpu-serving",
        ),
        pytest.param(
            "dev",
            NAMESPACE_TRITON,
            "Pulumi component Triton (pulumi/gpu_serving/components.py)",
            id="namespace-of-pulumi",
        ),
    ],
)
def test_an_addon_owned_twice_is_refused_naming_both_files_and_the_object(tmp_path, capsys, env, obj, other):
    cfg = from_stack_file(env)
    copy = addons_copy(tmp_path, cfg.inventory)
    write_manifest(copy / "50-extra.yaml", obj)
    before = snapshot(copy, REPO / "deploy")
    source = f"deploy/addons/{cfg.inventory}={copy}"
    assert ownership.main(["check", "--env", env, "--source", source]) == 1
    err = capsys.readouterr().err
    ident = identity(obj, "")
    addon = f"Argo CD Application gpu-addons ({copy / '50-extra.yaml'})"
    # Pulumi's claims come first, then the Applications' in the order their files sort.
    first, second = (other, addon) if other.startswith("Pulumi") else (addon, other)
    assert f"ownership: Pulumi.{env}.yaml: {ident}: owned twice, by {first} and by {second}\n" in err, err
    assert snapshot(copy, REPO / "deploy") == before, "a refused check writes nothing"


def test_an_addons_namespace_that_pulumi_creates_is_refused_before_deploy_addons_changes(tmp_path, capsys):
    """The real render with an inventory whose add-ons namespace is the monitoring one: the
    render itself succeeds, the ownership check that make render-addons runs before replacing
    deploy/addons/prod refuses it."""
    out = tmp_path / "prod"
    result = render("prod", out, {"k8s_addons_namespace": "monitoring"})
    assert result.returncode == 0, result.stdout + result.stderr
    before = snapshot(REPO / "deploy")
    assert ownership.main(["check", "--source", f"deploy/addons/prod={out}"]) == 1
    err = capsys.readouterr().err
    assert (
        "ownership: Pulumi.prod.yaml: Namespace monitoring: owned twice, by Pulumi component GrafanaAdmin "
        f"(pulumi/gpu_serving/components.py) and by Argo CD Application gpu-addons ({out / '00-namespace.yaml'})"
    ) in err
    # Only the stacks that sync deploy/addons/prod see the render in its place.
    assert "Pulumi.staging.yaml" not in err and "Pulumi.dev.yaml" not in err
    assert snapshot(REPO / "deploy") == before


def test_one_object_in_two_files_of_one_application_is_refused(tmp_path):
    copy = addons_copy(tmp_path, "prod")
    shutil.copy(copy / "00-namespace.yaml", copy / "01-namespace-again.yaml")
    cfg = from_stack_file("prod")
    (problem,) = doubled(claims(cfg, {"deploy/addons/prod": copy}))
    assert problem == (
        f"Namespace gpu-addons: defined twice, by Argo CD Application gpu-addons ({copy / '00-namespace.yaml'}) "
        f"and by Argo CD Application gpu-addons ({copy / '01-namespace-again.yaml'})"
    )


def test_a_synced_folder_without_manifests_cannot_be_proven(tmp_path):
    with pytest.raises(OwnershipError) as info:
        claims(from_stack_file("prod"), {"deploy/addons/prod": tmp_path})
    assert str(info.value) == (
        "deploy/serving/prod/apps/gpu-addons.yaml: spec.source.path: deploy/addons/prod holds no manifests, "
        "so what it syncs cannot be known"
    )


def test_an_application_from_another_repository_cannot_be_proven(tmp_path):
    apps = tmp_path / "apps"
    shutil.copytree(REPO / "deploy/serving/prod/apps", apps)
    app = yaml.safe_load((apps / "gpu-addons.yaml").read_text(encoding="utf-8"))
    app["spec"]["source"]["repoURL"] = "https://git.example.com/someone/else.git"
    write_manifest(apps / "gpu-addons.yaml", app)
    with pytest.raises(
        OwnershipError, match=r"gpu-addons\.yaml: spec\.source\.repoURL: .* is not the stack's gitRepoURL"
    ):
        claims(from_stack_file("prod"), {"deploy/serving/prod/apps": apps})


def test_managed_namespace_metadata_makes_the_application_an_owner_of_its_namespace(tmp_path):
    """CreateNamespace=true alone owns nothing; with managedNamespaceMetadata Argo CD applies the
    namespace's metadata, so a chart Application into monitoring then doubles Pulumi's namespace."""
    apps = tmp_path / "apps"
    shutil.copytree(REPO / "deploy/serving/prod/apps", apps)
    app = yaml.safe_load((apps / "prometheus-adapter.yaml").read_text(encoding="utf-8"))
    app["spec"]["syncPolicy"]["managedNamespaceMetadata"] = {"labels": {"team": "platform"}}
    write_manifest(apps / "prometheus-adapter.yaml", app)
    (problem,) = doubled(claims(from_stack_file("prod"), {"deploy/serving/prod/apps": apps}))
    assert problem.startswith("Namespace monitoring: owned twice, by Pulumi component GrafanaAdmin")
    assert problem.endswith(f"by Argo CD Application prometheus-adapter ({apps / 'prometheus-adapter.yaml'})")


def test_the_command_passes_every_committed_stack(capsys):
    assert ownership.main(["check"]) == 0
    out = capsys.readouterr().out
    assert [line.split(":")[1].strip() for line in out.splitlines()] == STACKS
