"""Argo CD hardening: every Application is in a project of its own kind (never `default`), the
project admits exactly what the Application syncs, syncs retry with backoff, and the
Application health check that orders the app-of-apps' waves works as Argo CD runs it (Lua 5.1,
the dialect of Argo CD's gopher-lua, through lupa)."""

from pathlib import Path

import jsonschema
import pytest
import yaml
from gpu_serving import charts, gitops, projects
from gpu_serving.config import from_stack_file
from gpu_serving.render import served_objects
from lupa import lua51

ROOT = Path(__file__).resolve().parents[2]
ENVS = ("dev", "staging", "prod")
PROJECT_SCHEMA = yaml.safe_load(Path(__file__).with_name("argocd-appproject.schema.yaml").read_text())
Obj = dict


def _group_kind(obj: Obj) -> tuple[str, str]:
    group = obj["apiVersion"].rpartition("/")[0]
    return group, obj["kind"]


def _refusal(project: Obj, obj: Obj) -> str | None:
    """Why Argo CD would refuse `obj` in `project`, or None. An object without a namespace is
    a cluster-scoped one (the renders always set the namespace of namespaced objects)."""
    spec = project["spec"]
    kind = {"group": _group_kind(obj)[0], "kind": obj["kind"]}
    namespace = obj["metadata"].get("namespace")
    if namespace is None:
        return None if kind in spec["clusterResourceWhitelist"] else f"cluster-scoped {kind} not whitelisted"
    if namespace not in {d["namespace"] for d in spec["destinations"]}:
        return f"namespace {namespace} is not a destination"
    allowed = spec.get("namespaceResourceWhitelist")
    if allowed is not None and kind not in allowed:
        return f"namespaced {kind} not whitelisted"
    return None


def _projects(env: str) -> dict[str, Obj]:
    return {p["metadata"]["name"]: p for p in projects.app_projects(from_stack_file(env))}


def _applications(env: str) -> list[Obj]:
    cfg = from_stack_file(env)
    return [gitops.root_application(cfg), *gitops.child_applications(cfg)]


@pytest.mark.parametrize("env", ENVS)
def test_every_project_matches_the_appproject_crd_schema(env):
    for name, project in _projects(env).items():
        errors = list(jsonschema.Draft202012Validator(PROJECT_SCHEMA).iter_errors(project))
        assert not errors, f"{name}: {[e.message for e in errors]}"


def test_the_appproject_schema_rejects_a_misspelt_field():
    project = _projects("prod")[projects.SERVING]
    project["spec"]["clusterResourceWhiteList"] = project["spec"].pop("clusterResourceWhitelist")
    assert not jsonschema.Draft202012Validator(PROJECT_SCHEMA).is_valid(project)


@pytest.mark.parametrize("env", ENVS)
def test_every_application_is_in_a_project_that_admits_its_source_and_destination(env):
    found = _projects(env)
    for app in _applications(env):
        spec = app["spec"]
        assert spec["project"] in found, f"{app['metadata']['name']}: project {spec['project']!r}"
        project = found[spec["project"]]["spec"]
        assert spec["source"]["repoURL"] in project["sourceRepos"], app["metadata"]["name"]
        assert spec["destination"] in project["destinations"], app["metadata"]["name"]


@pytest.mark.parametrize("env", ENVS)
def test_every_application_retries_failed_syncs_with_backoff(env):
    for app in _applications(env):
        retry = app["spec"]["syncPolicy"]["retry"]
        assert retry["limit"] > 0 and retry["backoff"]["factor"] >= 2, app["metadata"]["name"]


@pytest.mark.parametrize("env", ENVS)
def test_the_serving_project_admits_every_served_object_and_nothing_cluster_wide_but_namespace_and_priority(env):
    project = _projects(env)[projects.SERVING]
    refused = [
        f"{o['kind']}/{o['metadata']['name']}: {why}"
        for o in served_objects(from_stack_file(env))
        if (why := _refusal(project, o))
    ]
    assert not refused
    assert project["spec"]["clusterResourceWhitelist"] == [
        {"group": "", "kind": "Namespace"},
        {"group": "scheduling.k8s.io", "kind": "PriorityClass"},
    ]
    whitelist = project["spec"]["namespaceResourceWhitelist"]
    assert {"group": "", "kind": "Secret"} not in whitelist
    assert not [k for k in whitelist if k["group"] == "rbac.authorization.k8s.io"]


@pytest.mark.parametrize("inventory", ["staging", "prod"])
def test_the_addons_project_admits_every_rendered_add_on_object(inventory):
    project = _projects(inventory)[projects.ADDONS]
    objects = [
        obj
        for path in sorted((ROOT / "deploy/addons" / inventory).glob("*.yaml"))
        for obj in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if obj
    ]
    assert any(obj["kind"] == "Node" for obj in objects)
    refused = [f"{o['kind']}/{o['metadata']['name']}: {why}" for o in objects if (why := _refusal(project, o))]
    assert not refused


def test_the_bootstrap_project_admits_applications_only():
    project = _projects("prod")[projects.BOOTSTRAP]
    cfg = from_stack_file("prod")
    assert not [a for a in gitops.child_applications(cfg) if _refusal(project, a)]
    assert project["spec"]["clusterResourceWhitelist"] == []
    appproject = _projects("prod")[projects.SERVING]
    assert _refusal(project, appproject) == "namespaced {'group': 'argoproj.io', 'kind': 'AppProject'} not whitelisted"


def test_a_refusal_names_the_namespace_or_the_kind():
    project = _projects("prod")[projects.SERVING]
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "triton"}}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}}
    elsewhere = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "kube-system"}}
    assert "Secret" in _refusal(project, secret)
    assert "ClusterRole" in _refusal(project, role)
    assert _refusal(project, elsewhere) == "namespace kube-system is not a destination"


def _health(application: Obj) -> dict[str, str]:
    lua = lua51.LuaRuntime()
    lua.globals().obj = lua.table_from(application, recursive=True)
    result = lua.execute(charts.APPLICATION_HEALTH_LUA)
    return {"status": result["status"], "message": result["message"]}


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (None, "Progressing"),
        ({"sync": {"status": "OutOfSync"}}, "Progressing"),
        ({"health": {}}, "Progressing"),
        ({"health": {"status": "Healthy"}}, "Healthy"),
        ({"health": {"status": "Degraded", "message": "Deployment triton exceeded its progress deadline"}}, "Degraded"),
        ({"health": {"status": "Missing"}}, "Missing"),
    ],
)
def test_the_application_health_check_reports_the_childs_health(status, expected):
    app = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "gpu-serving"}}
    if status is not None:
        app["status"] = status
    health = _health(app)
    assert health["status"] == expected
    if expected == "Degraded":
        assert health["message"] == "Deployment triton exceeded its progress deadline"


def test_argo_cd_is_installed_with_the_application_health_check():
    values = charts.argo_cd(from_stack_file("prod")).values
    assert values["configs"]["cm"]["resource.customizations.health.argoproj.io_Application"] == (
        charts.APPLICATION_HEALTH_LUA
    )
