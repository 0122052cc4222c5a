"""Triton's Rollout as rendered (deploy/serving/<env>/manifests): the steps and their analysis,
Istio traffic routing on the objects that exist, what an abort does, the objects around it (HPA,
ServiceMonitor, Services, golden-set Job access), serving resilience (spread, priority, drain),
the Argo Rollouts v1.9.0 schemas, and the refusal of a step list that skips analysis."""

import copy
import json
import math
import subprocess
from pathlib import Path

import pytest
import yaml
from gpu_serving.config import ConfigError, from_stack_file
from gpu_serving.render import render
from serving_rules import violations

from serving.canary.conditions import evaluate
from serving.gateway.settings import parse
from tests.pulumi.semantics import Pod, Request, istio_allows, network_allows

ROOT = Path(__file__).resolve().parents[2]
ENVS = ("dev", "staging", "prod")
ROLLOUT = "kubernetes:argoproj.io/v1alpha1:Rollout"
TEMPLATES = ["triton-canary-latency", "triton-canary-errors", "triton-canary-accuracy"]
VALIDATOR = ROOT / ".cache" / "argo-rollouts-schema" / "validate.mjs"


def rendered(env: str) -> dict[tuple[str, str], dict]:
    objs = {}
    for path in sorted((ROOT / "deploy" / "serving" / env / "manifests").glob("*.yaml")):
        obj = yaml.safe_load(path.read_text(encoding="utf-8"))
        objs[obj["kind"], obj["metadata"]["name"]] = obj
    return objs


@pytest.mark.parametrize("env", ENVS)
def test_the_steps_are_5_analysis_50_analysis_and_every_analysis_gets_both_hashes(env):
    objs = rendered(env)
    canary = objs["Rollout", "triton"]["spec"]["strategy"]["canary"]
    steps = canary["steps"]
    assert [s.get("setWeight") for s in steps] == [5, None, 50, None]
    hashes = [
        {"name": "stable-hash", "valueFrom": {"podTemplateHashValue": "Stable"}},
        {"name": "canary-hash", "valueFrom": {"podTemplateHashValue": "Latest"}},
    ]
    for step in (steps[1], steps[3]):
        assert [t["templateName"] for t in step["analysis"]["templates"]] == TEMPLATES
        assert step["analysis"]["args"] == hashes
        for name in TEMPLATES:  # every argument without a value is one the step passes
            required = {a["name"] for a in objs["AnalysisTemplate", name]["spec"]["args"] if "value" not in a}
            assert required <= {a["name"] for a in hashes}, name
    # No setWeight 100: when the steps end, Argo Rollouts promotes the canary to 100% itself.
    assert 100 not in [s.get("setWeight") for s in steps]


@pytest.mark.parametrize("env", ENVS)
def test_istio_routing_names_the_rendered_route_subsets_and_services(env):
    objs = rendered(env)
    canary = objs["Rollout", "triton"]["spec"]["strategy"]["canary"]
    istio = canary["trafficRouting"]["istio"]
    virtual_service = objs["VirtualService", istio["virtualService"]["name"]]["spec"]
    (route,) = [h for h in virtual_service["http"] if h["name"] in istio["virtualService"]["routes"]]
    rule = objs["DestinationRule", istio["destinationRule"]["name"]]["spec"]
    subsets = {istio["destinationRule"]["stableSubsetName"], istio["destinationRule"]["canarySubsetName"]}
    assert {s["name"] for s in rule["subsets"]} == subsets == {d["destination"]["subset"] for d in route["route"]}
    # Argo Rollouts writes the pod-template hash into the subsets: none may carry labels of its own.
    assert all(set(s) == {"name"} for s in rule["subsets"])
    assert {d["destination"]["subset"]: d["weight"] for d in route["route"]} == {"stable": 100, "canary": 0}
    for service in (canary["stableService"], canary["canaryService"]):
        assert (
            objs["Service", service]["spec"]["selector"] == objs["Rollout", "triton"]["spec"]["selector"]["matchLabels"]
        )


@pytest.mark.parametrize("env", ENVS)
def test_an_abort_sends_everything_back_to_a_stable_that_kept_its_size(env):
    """On an abort Argo Rollouts sets the canary subset's weight to 0 (Istio routing): all traffic
    is on stable at once, because the stable ReplicaSet never shrank (no dynamicStableScale);
    the canary pods go after abortScaleDownDelaySeconds. A canary that never gets ready aborts too."""
    spec = rendered(env)["Rollout", "triton"]["spec"]
    canary = spec["strategy"]["canary"]
    assert not canary.get("dynamicStableScale", False)
    assert canary["abortScaleDownDelaySeconds"] > 0 and canary["scaleDownDelaySeconds"] >= 30
    assert canary["maxUnavailable"] == 0
    assert spec["progressDeadlineAbort"] is True
    assert spec["progressDeadlineSeconds"] > from_stack_file(env).triton.startup_budget_seconds


@pytest.mark.parametrize("env", ENVS)
def test_the_hpa_scales_the_rollout_and_argo_cd_ignores_what_rollouts_rewrites(env):
    objs = rendered(env)
    hpa = objs["HorizontalPodAutoscaler", "triton"]["spec"]["scaleTargetRef"]
    assert hpa == {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "name": "triton"}
    assert "replicas" not in objs["Rollout", "triton"]["spec"]
    app = yaml.safe_load((ROOT / "deploy/serving" / env / "apps/gpu-serving.yaml").read_text(encoding="utf-8"))
    ignored = {(d["kind"], d["name"]): d for d in app["spec"]["ignoreDifferences"]}
    assert ignored["Rollout", "triton"]["jsonPointers"] == ["/spec/replicas"]
    assert ignored["VirtualService", "triton"]["jqPathExpressions"] == [".spec.http[].route[].weight"]
    assert ignored["DestinationRule", "triton"]["jqPathExpressions"] == [".spec.subsets[].labels"]
    for service in ("triton-stable", "triton-canary"):
        assert ignored["Service", service]["jsonPointers"] == ["/spec/selector/rollouts-pod-template-hash"]
    assert "RespectIgnoreDifferences=true" in app["spec"]["syncPolicy"]["syncOptions"]


@pytest.mark.parametrize("env", ENVS)
def test_the_service_monitor_copies_the_pod_template_hash_and_scrapes_one_service(env):
    objs = rendered(env)
    monitor = objs["ServiceMonitor", "triton"]["spec"]
    (endpoint,) = monitor["endpoints"]
    assert endpoint["relabelings"] == [
        {
            "action": "replace",
            "sourceLabels": ["__meta_kubernetes_pod_label_rollouts_pod_template_hash"],
            "targetLabel": "rollouts_pod_template_hash",
        }
    ]
    selector = monitor["selector"]["matchLabels"]
    scraped = [
        name
        for (kind, name), obj in objs.items()
        if kind == "Service" and selector.items() <= obj["metadata"]["labels"].items()
    ]
    assert scraped == ["triton"]


@pytest.mark.parametrize("env", ENVS)
def test_the_golden_set_job_reaches_both_tracks_and_nothing_else_new_does(env):
    objs = rendered(env)
    network = [o for o in objs.values() if o["kind"] == "NetworkPolicy"]
    istio = [o for o in objs.values() if o["kind"] == "AuthorizationPolicy"]
    template = objs["AnalysisTemplate", "triton-canary-accuracy"]["spec"]["metrics"][0]["provider"]["job"]["spec"]
    job = Pod("triton", template["template"]["metadata"]["labels"])
    principal = f"cluster.local/ns/triton/sa/{template['template']['spec']['serviceAccountName']}"
    labels = objs["Rollout", "triton"]["spec"]["template"]["metadata"]["labels"]
    for track in ("abc123", "def456"):
        triton = Pod("triton", {**labels, "rollouts-pod-template-hash": track})
        assert network_allows(network, job, triton, 8001)
        assert istio_allows(
            istio, triton, Request(8001, "POST", "/inference.GRPCInferenceService/ModelInfer", principal)
        )
        assert not network_allows(network, job, triton, 8000)
    assert ("ServiceAccount", template["template"]["spec"]["serviceAccountName"]) in objs


@pytest.mark.parametrize("env", ENVS)
def test_replicas_spread_rank_above_batch_work_and_drain_before_they_stop(env):
    objs = rendered(env)
    pod = objs["Rollout", "triton"]["spec"]["template"]
    spec = pod["spec"]
    keys = {c["topologyKey"] for c in spec["topologySpreadConstraints"]}
    assert keys == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    assert all(c["matchLabelKeys"] == ["rollouts-pod-template-hash"] for c in spec["topologySpreadConstraints"])
    priority = objs["PriorityClass", spec["priorityClassName"]]
    assert 0 < priority["value"] < 1_000_000_000 and priority["globalDefault"] is False
    (container,) = spec["containers"]
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    (exit_timeout,) = [int(a.split("=")[1]) for a in container["args"] if a.startswith("--exit-timeout-secs=")]
    assert spec["terminationGracePeriodSeconds"] > pre_stop + exit_timeout
    drain = json.loads(pod["metadata"]["annotations"]["proxy.istio.io/config"])["terminationDrainDuration"]
    assert drain == f"{pre_stop + exit_timeout}s"


@pytest.mark.parametrize("env", ENVS)
def test_triton_and_gateway_routes_time_out_retry_only_unsent_requests_and_eject_failing_pods(env):
    objs = rendered(env)
    (http,) = objs["VirtualService", "triton"]["spec"]["http"]
    assert http["timeout"] == "30s"
    assert set(http["retries"]["retryOn"].split(",")) == {"connect-failure", "refused-stream"}
    outlier = objs["DestinationRule", "triton"]["spec"]["trafficPolicy"]["outlierDetection"]
    assert outlier["consecutive5xxErrors"] >= 1 and outlier["maxEjectionPercent"] <= 50
    (gateway,) = objs["VirtualService", "gateway"]["spec"]["http"]
    assert int(gateway["timeout"].rstrip("s")) > int(http["timeout"].rstrip("s"))
    outlier = objs["DestinationRule", "gateway"]["spec"]["trafficPolicy"]["outlierDetection"]
    # The gateway's own 5xx (a model not loaded, a deadline) are the same on every replica: only
    # connection-level failures eject one.
    assert outlier["splitExternalLocalOriginErrors"] is True and outlier["consecutiveLocalOriginFailures"] >= 1
    assert outlier["consecutive5xxErrors"] == 0 and outlier["maxEjectionPercent"] <= 50


@pytest.mark.parametrize("env", ENVS)
def test_callers_close_idle_gateway_connections_before_the_gateway_does(env):
    """The gateway's keep-alive (its env, read by serving.gateway.settings) outlasts the callers'
    idle timeout (the DestinationRule's), so the gateway never closes a connection a caller may be
    sending on."""
    objs = rendered(env)
    idle = objs["DestinationRule", "gateway"]["spec"]["trafficPolicy"]["connectionPool"]["http"]["idleTimeout"]
    (container,) = objs["Deployment", "gateway"]["spec"]["template"]["spec"]["containers"]
    env_vars = {var["name"]: var["value"] for var in container["env"]}
    settings = parse(["--triton-grpc", "triton:8001"], env_vars)
    assert settings.keep_alive_s > int(idle.removesuffix("s")) > 0


@pytest.mark.parametrize("env", ENVS)
def test_no_data_and_nan_decide_no_prometheus_measurement(env):
    """The templates' own conditions, evaluated with expr-lang's semantics (serving.canary.conditions)
    on an empty result and on NaN: neither the success nor the failure condition holds."""
    checked = 0
    for (kind, _), obj in rendered(env).items():
        if kind != "AnalysisTemplate":
            continue
        for metric in obj["spec"]["metrics"]:
            if "prometheus" not in metric["provider"]:
                continue
            for condition in (metric["successCondition"], metric["failureCondition"]):
                assert evaluate(condition, []) is False and evaluate(condition, [math.nan]) is False
                checked += 1
    assert checked == 4


def schema_errors(objs: list[dict]) -> list[dict]:
    assert VALIDATOR.is_file(), "run `make rollouts-schema` (make test-offline does)"
    lines = "".join(json.dumps(obj) + "\n" for obj in objs)
    result = subprocess.run(
        ["node", str(VALIDATOR)], input=lines, capture_output=True, text=True, check=True, timeout=120
    )
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.parametrize("env", ENVS)
def test_rollout_and_analysis_templates_match_argo_rollouts_v1_9_schemas(env):
    objs = [o for (kind, _), o in rendered(env).items() if kind in ("Rollout", "AnalysisTemplate")]
    results = schema_errors(objs)
    assert [(r["kind"], r["name"]) for r in results] == [(o["kind"], o["metadata"]["name"]) for o in objs]
    assert [r for r in results if r["errors"]] == []
    assert len(results) == 4


def test_the_schema_check_catches_a_wrong_type_in_the_rollout():
    rollout = copy.deepcopy(rendered("prod")["Rollout", "triton"])
    rollout["spec"]["strategy"]["canary"]["steps"][0]["setWeight"] = "5"
    rollout["spec"]["strategy"]["canary"]["trafficRouting"]["istio"]["virtualService"]["routes"] = "primary"
    (result,) = schema_errors([rollout])
    assert any("setWeight must be integer" in e for e in result["errors"]), result
    assert any("routes must be array" in e for e in result["errors"]), result


def test_the_rendered_rollouts_break_no_policy_and_a_skipped_analysis_does():
    rollout = rendered("prod")["Rollout", "triton"]
    assert violations(ROLLOUT, rollout) == []
    broken = copy.deepcopy(rollout)
    del broken["spec"]["strategy"]["canary"]["steps"][1]
    assert [name for name, _ in violations(ROLLOUT, broken)] == ["rollouts-analyse-between-weights"]


def stack_with_steps(tmp_path: Path, steps: list) -> Path:
    document = yaml.safe_load((ROOT / "pulumi" / "Pulumi.prod.yaml").read_text(encoding="utf-8"))
    document["config"]["gpu-serving:triton"]["canary"]["steps"] = steps
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


ANALYSIS = {"analysis": TEMPLATES}


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        (
            [{"setWeight": 5}, {"setWeight": 50}, ANALYSIS],
            "triton.canary.steps[1]: setWeight 50 follows setWeight 5 (steps[0]) with no analysis step between them",
        ),
        (
            [{"setWeight": 5}, ANALYSIS, {"setWeight": 50}],
            "triton.canary.steps: the steps end after setWeight 50 (steps[2]) with no analysis",
        ),
        (
            [{"setWeight": 5}, {"pause": "5m"}, {"setWeight": 50}, ANALYSIS],
            "triton.canary.steps[2]: setWeight 50 follows setWeight 5 (steps[0]) with no analysis",
        ),
        ([ANALYSIS, {"setWeight": 50}, ANALYSIS], "triton.canary.steps[0]: an analysis before any setWeight"),
        ([{"setWeight": 50}, ANALYSIS, {"setWeight": 5}, ANALYSIS], "steps[2].setWeight: setWeight 5 does not grow"),
        ([{"setWeight": 5}, {"analysis": ["p95"]}], "steps[1].analysis: unknown AnalysisTemplate 'p95'"),
        ([{"setWeight": 5}, {"analysis": []}], "steps[1].analysis: must be a non-empty list"),
        ([{"setWeight": 5, "pause": "1m"}, ANALYSIS], "triton.canary.steps[0]: must be one of"),
        ([], "triton.canary.steps: must be a non-empty list"),
    ],
    ids=[
        "weight-after-weight",
        "ends-unchecked",
        "pause-is-no-analysis",
        "analysis-first",
        "shrinks",
        "unknown",
        "empty-analysis",
        "two-kinds",
        "no-steps",
    ],
)
def test_a_step_list_that_skips_analysis_is_refused_naming_file_and_field(tmp_path, steps, expected):
    with pytest.raises(ConfigError) as info:
        from_stack_file("prod", stack_with_steps(tmp_path, steps))
    assert str(info.value).startswith("Pulumi.prod.yaml: gpu-serving:")
    assert expected in str(info.value)


def test_a_step_list_may_end_at_100_with_an_analysis_after_it(tmp_path):
    steps = [{"setWeight": 5}, ANALYSIS, {"setWeight": 100}, {"analysis": TEMPLATES[:1]}]
    cfg = from_stack_file("prod", stack_with_steps(tmp_path, steps))
    rollout = next(yaml.safe_load(t) for n, t in render(cfg).items() if n.endswith("-rollout-triton.yaml"))
    assert [s.get("setWeight") for s in rollout["spec"]["strategy"]["canary"]["steps"]] == [5, None, 100, None]
    assert violations(ROLLOUT, rollout) == []
