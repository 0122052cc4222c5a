"""The committed deploy/serving/<env>/ is a fresh render, and it passes the schema checks:
kubernetes-validate --strict for built-in kinds, cloudcoil's pydantic models for Istio, the
ServiceMonitor and the PrometheusRule, the vendored Application and AppProject schemas for Argo CD, and checkov."""

import json
import subprocess
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from cloudcoil.models.istio.networking import v1 as istio_networking
from cloudcoil.models.istio.security import v1 as istio_security
from cloudcoil.models.prometheus_operator import v1 as prometheus_operator
from gpu_serving.config import from_stack_file
from gpu_serving.render import main, render, write

import platform_matrix
from monitoring import alerting
from monitoring.spec import with_runbook

ROOT = Path(__file__).resolve().parents[2]
ENVS = ("dev", "staging", "prod")
APPLICATION_SCHEMA = yaml.safe_load(Path(__file__).with_name("argocd-application.schema.yaml").read_text())
PROJECT_SCHEMA = yaml.safe_load(Path(__file__).with_name("argocd-appproject.schema.yaml").read_text())
CRD_MODELS = {
    ("security.istio.io/v1", "PeerAuthentication"): istio_security.PeerAuthentication,
    ("security.istio.io/v1", "AuthorizationPolicy"): istio_security.AuthorizationPolicy,
    ("networking.istio.io/v1", "DestinationRule"): istio_networking.DestinationRule,
    ("networking.istio.io/v1", "VirtualService"): istio_networking.VirtualService,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): prometheus_operator.ServiceMonitor,
    ("monitoring.coreos.com/v1", "PrometheusRule"): prometheus_operator.PrometheusRule,
}


def rendered(env: str) -> list[tuple[Path, dict]]:
    folder = ROOT / "deploy" / "serving" / env
    return [(path, yaml.safe_load(path.read_text(encoding="utf-8"))) for path in sorted(folder.rglob("*.yaml"))]


@pytest.mark.parametrize("env", ENVS)
def test_the_committed_render_is_fresh(env):
    folder = ROOT / "deploy" / "serving" / env
    expected = render(from_stack_file(env))
    committed = {p.relative_to(folder).as_posix(): p.read_text(encoding="utf-8") for p in folder.rglob("*.yaml")}
    assert sorted(committed) == sorted(expected), f"run `make render ENV={env}` and commit {folder}"
    for name, text in expected.items():
        assert committed[name] == text, f"{folder / name} differs from a fresh render: run `make render ENV={env}`"


def test_write_removes_files_of_objects_that_no_longer_exist(tmp_path):
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "99-deployment-gone.yaml").write_text("---\n")
    write({"root.yaml": "---\n"}, tmp_path)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["manifests", "root.yaml"]


def test_render_cli_reports_bad_config_and_exits_2(tmp_path, capsys):
    assert main(["--env", "nope", "--out", str(tmp_path / "out")]) == 2
    assert "render: Pulumi.nope.yaml: cannot read the stack file" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_route_to_an_unknown_receiver_is_refused_and_the_render_left_unchanged(tmp_path, monkeypatch, capsys):
    out = tmp_path / "prod"
    write(render(from_stack_file("prod")), out)
    config = yaml.safe_load(alerting.SOURCE.read_text(encoding="utf-8"))
    config["route"]["routes"][2]["receiver"] = "tickets"
    source = tmp_path / "alertmanager.yml"
    source.write_text(yaml.safe_dump(config), encoding="utf-8")
    monkeypatch.setattr(alerting, "SOURCE", source)
    before = {path: path.read_bytes() for path in out.rglob("*.yaml")}
    assert main(["--env", "prod", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        "render: monitoring/alertmanager.yml: route.routes[2].receiver: 'tickets' is not a receiver"
        " (page, ticket, heartbeat, null)\n"
    )
    assert {path: path.read_bytes() for path in out.rglob("*.yaml")} == before


@pytest.mark.parametrize("env", ENVS)
def test_each_environment_deploys_monitoring_alertmanager_yml_as_it_is_and_the_rules_with_its_runbook(env):
    cfg = from_stack_file(env)
    files = {path.relative_to(ROOT / "deploy/serving" / env).as_posix(): obj for path, obj in rendered(env)}
    stack = files["apps/kube-prometheus-stack.yaml"]
    values = stack["spec"]["source"]["helm"]["valuesObject"]
    assert values["alertmanager"]["config"] == yaml.safe_load(alerting.SOURCE.read_text(encoding="utf-8"))
    assert values["alertmanager"]["alertmanagerSpec"]["secrets"] == [alerting.RECEIVERS_SECRET]
    (rule,) = [obj for obj in files.values() if obj["kind"] == "PrometheusRule"]
    urls = {r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"] if "annotations" in r}
    assert urls and all(url.startswith(cfg.monitoring.runbook_url + "#") for url in urls)
    generated = yaml.safe_load((ROOT / "monitoring/generated/rules.yml").read_text(encoding="utf-8"))
    assert rule["spec"] == with_runbook(generated, cfg.monitoring.runbook_url)


@pytest.mark.parametrize("env", ENVS)
def test_built_in_kinds_pass_kubernetes_validate_strict(env):
    version = platform_matrix.load().kubernetes_version
    checked = 0
    for _path, obj in rendered(env):
        if (obj["apiVersion"], obj["kind"]) in CRD_MODELS or obj["apiVersion"] == "argoproj.io/v1alpha1":
            continue
        kubernetes_validate.validate(obj, version, strict=True)
        checked += 1
    assert checked >= 8, "expected Namespace, ServiceAccount, Deployment, Service, PDB, HPA, NetworkPolicy, ConfigMap"


def without_empty(value):
    if isinstance(value, dict):
        return {k: without_empty(v) for k, v in value.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [without_empty(v) for v in value]
    return value


@pytest.mark.parametrize("env", ENVS)
def test_istio_and_prometheus_operator_objects_match_their_crd_models_field_for_field(env):
    seen = set()
    for path, obj in rendered(env):
        model = CRD_MODELS.get((obj["apiVersion"], obj["kind"]))
        if model is None:
            continue
        parsed = model.model_validate(obj)
        # pydantic drops unknown fields silently: a field lost in the round trip is a misspelt one.
        dumped = parsed.model_dump(mode="json", by_alias=True, exclude_none=True)
        assert without_empty(dumped) == without_empty(obj), f"{path}: fields unknown to {model.__name__}"
        seen.add(obj["kind"])
    assert seen == {
        "PeerAuthentication",
        "AuthorizationPolicy",
        "DestinationRule",
        "VirtualService",
        "ServiceMonitor",
        "PrometheusRule",
    }


def test_a_misspelt_istio_field_is_caught_by_the_round_trip():
    obj = {"apiVersion": "networking.istio.io/v1", "kind": "VirtualService", "metadata": {"name": "x"}}
    obj["spec"] = {"hosts": ["a"], "http": [{"routes": [{"destination": {"host": "a"}}]}]}
    dumped = istio_networking.VirtualService.model_validate(obj).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    assert without_empty(dumped) != without_empty(obj)


@pytest.mark.parametrize("env", ENVS)
def test_argo_cd_applications_match_the_application_crd_schema(env):
    apps = [(path, obj) for path, obj in rendered(env) if obj["kind"] == "Application"]
    assert len(apps) == 9  # root, six charts, add-ons, serving manifests
    for path, obj in apps:
        errors = list(jsonschema.Draft202012Validator(APPLICATION_SCHEMA).iter_errors(obj))
        assert not errors, f"{path}: {[e.message for e in errors]}"


@pytest.mark.parametrize("env", ENVS)
def test_argo_cd_projects_match_the_appproject_crd_schema(env):
    found = [(path, obj) for path, obj in rendered(env) if obj["kind"] == "AppProject"]
    assert {obj["metadata"]["name"] for _, obj in found} == {
        "gpu-bootstrap",
        "gpu-platform",
        "gpu-addons",
        "gpu-serving",
    }
    for path, obj in found:
        errors = list(jsonschema.Draft202012Validator(PROJECT_SCHEMA).iter_errors(obj))
        assert not errors, f"{path}: {[e.message for e in errors]}"


def test_the_application_schema_rejects_a_misspelt_sync_policy():
    obj = json.loads(json.dumps(rendered("prod")[0][1]))
    obj["spec"]["syncPolicy"]["automated"]["selfheal"] = True
    assert not jsonschema.Draft202012Validator(APPLICATION_SCHEMA).is_valid(obj)


def test_no_literal_password_in_any_render():
    for env in ENVS:
        for path, obj in rendered(env):
            text = json.dumps(obj)
            assert "adminPassword" not in text, path
    grafana = yaml.safe_load((ROOT / "deploy/serving/prod/apps/kube-prometheus-stack.yaml").read_text())
    admin = grafana["spec"]["source"]["helm"]["valuesObject"]["grafana"]["admin"]
    assert admin == {"existingSecret": "grafana-admin", "userKey": "admin-user", "passwordKey": "admin-password"}


def checkov(folder: Path) -> dict:
    binary = ROOT / ".venv-checkov" / "bin" / "checkov"
    command = [str(binary), "-d", str(folder), "--framework", "kubernetes", "--output", "json"]
    result = subprocess.run([*command, "--skip-download"], capture_output=True, text=True, check=False, timeout=600)
    report = json.loads(result.stdout)
    return report if isinstance(report, dict) else report[0]


def test_checkov_finds_no_failure_and_every_skip_has_a_written_reason():
    report = checkov(ROOT / "deploy" / "serving" / "prod")
    failed = [(c["check_id"], c["resource"]) for c in report["results"]["failed_checks"]]
    assert failed == []
    assert report["summary"]["parsing_errors"] == 0 and report["summary"]["passed"] > 100
    skipped = report["results"]["skipped_checks"]
    assert skipped, "the Deployments carry waivers; checkov must have read them"
    for check in skipped:
        assert len(check["check_result"].get("suppress_comment", "")) > 20, check["check_id"]
