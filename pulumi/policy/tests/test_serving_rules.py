"""Each validator against good and bad resources, fed as dicts; and the pack's policies wrap them."""

import copy
from collections.abc import Callable

import pytest
from pack import policies
from pulumi_policy import PolicyCustomTimeouts, PolicyResourceOptions, ResourceValidationArgs
from serving_rules import RULES, type_token, violations

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
APPLICATION = "kubernetes:argoproj.io/v1alpha1:Application"
GOOD = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "triton", "namespace": "triton", "labels": {"app.kubernetes.io/part-of": "gpu-serving"}},
    "spec": {
        "template": {
            "spec": {
                "nodeSelector": {"nvidia.com/gpu.present": "true"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [
                    {
                        "name": "triton",
                        "image": "nvcr.io/nvidia/tritonserver:24.05-py3",
                        "resources": {
                            "requests": {"cpu": "1", "memory": "1Gi"},
                            "limits": {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "1"},
                        },
                        "livenessProbe": {"httpGet": {"path": "/v2/health/live", "port": 8000}},
                        "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": 8000}},
                    }
                ],
            }
        }
    },
}


def changed(change: Callable[[dict], object]) -> dict:
    obj = copy.deepcopy(GOOD)
    change(obj)
    return obj


def container(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]["containers"][0]


def pod(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]


def test_a_good_gpu_deployment_breaks_no_rule() -> None:
    assert violations(DEPLOYMENT, GOOD) == []


@pytest.mark.parametrize(
    ("change", "rule", "message"),
    [
        (lambda o: container(o)["resources"].pop("limits"), "containers-have-requests-and-limits", "no limits"),
        (
            lambda o: container(o)["resources"]["requests"].pop("memory"),
            "containers-have-requests-and-limits",
            "memory",
        ),
        (lambda o: container(o).pop("readinessProbe"), "containers-have-probes", "no readinessProbe"),
        (lambda o: pod(o).pop("nodeSelector"), "gpu-pods-are-placed-on-gpu-nodes", "no nodeSelector"),
        (lambda o: pod(o).pop("tolerations"), "gpu-pods-are-placed-on-gpu-nodes", "does not tolerate"),
        (lambda o: container(o).update(image="nvcr.io/nvidia/tritonserver:latest"), "images-are-pinned", "latest"),
        (lambda o: container(o).update(image="nvcr.io/nvidia/tritonserver"), "images-are-pinned", "not pinned"),
    ],
)
def test_each_broken_deployment_breaks_exactly_its_rule(
    change: Callable[[dict], object], rule: str, message: str
) -> None:
    found = violations(DEPLOYMENT, changed(change))
    assert [name for name, _ in found] == [rule]
    assert message in found[0][1] and "triton/triton" in found[0][1]


def test_a_digest_pins_an_image_and_a_registry_port_is_no_tag() -> None:
    assert violations(DEPLOYMENT, changed(lambda o: container(o).update(image="r.io/x@sha256:" + "a" * 64))) == []
    found = violations(DEPLOYMENT, changed(lambda o: container(o).update(image="registry:5000/triton")))
    assert [name for name, _ in found] == ["images-are-pinned"]


def test_a_cpu_pod_needs_no_gpu_placement() -> None:
    def cpu_only(obj: dict) -> None:
        container(obj)["resources"]["limits"].pop("nvidia.com/gpu")
        pod(obj).pop("nodeSelector")
        pod(obj).pop("tolerations")

    assert violations(DEPLOYMENT, changed(cpu_only)) == []


def test_third_party_workloads_are_held_to_placement_and_pins_but_not_our_resources_rule() -> None:
    def foreign(obj: dict) -> None:
        obj["metadata"]["labels"] = {}
        container(obj).pop("resources")
        container(obj).pop("livenessProbe")

    assert violations(DEPLOYMENT, changed(foreign)) == []
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"}}
    cron["spec"] = {
        "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
    }
    assert [name for name, _ in violations("kubernetes:batch/v1:CronJob", cron)] == ["images-are-pinned"]


@pytest.mark.parametrize(("version", "broken"), [("75.15.1", False), ("", True), ("^75.0.0", True), ("75.x", True)])
def test_helm_charts_need_an_exact_version(version: str, broken: bool) -> None:
    props = {"chart": "kube-prometheus-stack", "version": version}
    assert bool(violations("kubernetes:helm.sh/v4:Chart", props)) is broken


@pytest.mark.parametrize(("revision", "broken"), [("1.26.3", False), ("HEAD", True), ("1.26.*", True)])
def test_argo_cd_chart_sources_need_an_exact_target_revision(revision: str, broken: bool) -> None:
    source = {"chart": "istiod", "targetRevision": revision}
    props = {"metadata": {"name": "istiod"}, "spec": {"project": "gpu-platform", "source": source}}
    assert bool(violations(APPLICATION, props)) is broken


def test_git_sources_may_track_a_branch() -> None:
    source = {"path": "deploy", "targetRevision": "main"}
    props = {"metadata": {"name": "root"}, "spec": {"project": "gpu-bootstrap", "source": source}}
    assert violations(APPLICATION, props) == []


@pytest.mark.parametrize(("project", "broken"), [("gpu-serving", False), ("default", True), (None, True)])
def test_applications_name_a_project_other_than_default(project: str | None, broken: bool) -> None:
    props = {"metadata": {"name": "app"}, "spec": {"source": {"path": "deploy"}}}
    if project:
        props["spec"]["project"] = project
    found = [name for name, _ in violations(APPLICATION, props)]
    assert found == (["applications-name-their-project"] if broken else [])


@pytest.mark.parametrize(
    ("sync_policy", "broken"),
    [
        ({"automated": {"prune": True}}, True),
        ({"automated": {}, "retry": {"limit": 5}}, True),
        ({"automated": {}, "retry": {"limit": 5, "backoff": {"duration": "10s", "factor": 2}}}, False),
        ({}, False),  # manual syncs: a person retries
    ],
)
def test_automated_syncs_retry_with_backoff(sync_policy: dict, broken: bool) -> None:
    props = {"metadata": {"name": "app"}, "spec": {"project": "gpu-serving", "syncPolicy": sync_policy}}
    found = [name for name, _ in violations(APPLICATION, props)]
    assert found == (["automated-syncs-retry-with-backoff"] if broken else [])


@pytest.mark.parametrize(
    ("labels", "kind", "broken"),
    [({}, "LoadBalancer", True), ({"istio": "ingressgateway"}, "LoadBalancer", False), ({}, "ClusterIP", False)],
)
def test_load_balancers_only_for_the_ingress_gateway(labels: dict, kind: str, broken: bool) -> None:
    props = {"metadata": {"name": "svc", "labels": labels}, "spec": {"type": kind}}
    assert bool(violations("kubernetes:core/v1:Service", props)) is broken


def test_type_tokens_follow_pulumi_kubernetes() -> None:
    assert type_token({"apiVersion": "apps/v1", "kind": "Deployment"}) == DEPLOYMENT
    assert type_token({"apiVersion": "v1", "kind": "Service"}) == "kubernetes:core/v1:Service"


def test_the_pack_reports_each_rule_through_pulumi_policy() -> None:
    pack = {policy.name: policy for policy in policies()}
    assert set(pack) == set(RULES)
    reported: list[str] = []
    options = PolicyResourceOptions(
        protect=False,
        ignore_changes=[],
        delete_before_replace=None,
        aliases=[],
        custom_timeouts=PolicyCustomTimeouts(0, 0, 0),
        additional_secret_outputs=[],
    )
    props = changed(lambda o: pod(o).pop("tolerations"))
    args = ResourceValidationArgs(DEPLOYMENT, props, "urn:pulumi:prod::gpu-serving::x", "triton", options, None)
    for policy in pack.values():
        policy.validate(args, lambda message, urn: reported.append(message))
    assert reported == ["triton/triton: requests nvidia.com/gpu but does not tolerate the nvidia.com/gpu taint"]


ROLLOUT = "kubernetes:argoproj.io/v1alpha1:Rollout"
TEMPLATE = "kubernetes:argoproj.io/v1alpha1:AnalysisTemplate"
ANALYSIS = {"analysis": {"templates": [{"templateName": "triton-canary-latency"}]}}


def rollout(steps: list[dict], **routing: object) -> dict:
    canary = {"steps": steps, "trafficRouting": {"istio": {}, **routing}}
    return {"metadata": {"name": "triton", "namespace": "triton"}, "spec": {"strategy": {"canary": canary}}}


@pytest.mark.parametrize(
    ("steps", "rules"),
    [
        ([{"setWeight": 5}, ANALYSIS, {"setWeight": 50}, ANALYSIS], set()),
        ([{"setWeight": 5}, ANALYSIS, {"setWeight": 100}], set()),
        ([{"setWeight": 5}, ANALYSIS, {"setWeight": 50}, {"pause": {"duration": "5m"}}], {"analyse"}),
        ([{"setWeight": 5}, {"setWeight": 50}, ANALYSIS], {"analyse"}),
        ([{"setWeight": 5}, {"analysis": {"templates": []}}, {"setWeight": 50}, ANALYSIS], {"analyse"}),
        ([], {"analyse"}),
        ([{"setWeight": 50}, ANALYSIS, {"setWeight": 5}, ANALYSIS], {"weights"}),
        ([{"setWeight": 5}, ANALYSIS, {"setWeight": 150}, ANALYSIS], {"weights"}),
    ],
    ids=[
        "5-50",
        "ends-at-100",
        "pause-is-no-analysis",
        "weight-after-weight",
        "empty-analysis",
        "no-steps",
        "shrinks",
        "above-100",
    ],
)
def test_rollouts_analyse_between_weights_that_grow_to_100(steps: list[dict], rules: set[str]) -> None:
    names = {"rollouts-analyse-between-weights": "analyse", "rollout-weights-end-at-100": "weights"}
    assert {names[name] for name, _ in violations(ROLLOUT, rollout(steps))} == rules


def test_a_skipped_analysis_is_named_by_its_step() -> None:
    (message,) = [m for _, m in violations(ROLLOUT, rollout([{"setWeight": 5}, {"setWeight": 50}, ANALYSIS]))]
    assert message == (
        "triton/triton: steps[1] setWeight 50 follows setWeight 5 (steps[0]) with no analysis step between them"
    )


def test_weights_must_be_percentages_and_blue_green_needs_pre_promotion_analysis() -> None:
    scaled = rollout([{"setWeight": 5}, ANALYSIS], maxTrafficWeight=1000)
    assert [name for name, _ in violations(ROLLOUT, scaled)] == ["rollout-weights-end-at-100"]
    blue_green = {"metadata": {"name": "b"}, "spec": {"strategy": {"blueGreen": {"activeService": "a"}}}}
    assert [name for name, _ in violations(ROLLOUT, blue_green)] == ["rollouts-analyse-between-weights"]
    blue_green["spec"]["strategy"]["blueGreen"]["prePromotionAnalysis"] = {"templates": [{"templateName": "t"}]}
    assert violations(ROLLOUT, blue_green) == []


GUARD = "len(result) == 1 && !isNaN(result[0]) && "
INCONCLUSIVE_RULE = "analysis-treats-no-data-as-inconclusive"


def template(success: str | None, failure: str | None, provider: str = "prometheus") -> dict:
    metric: dict = {"name": "p95", "provider": {provider: {}}}
    if success is not None:
        metric["successCondition"] = success
    if failure is not None:
        metric["failureCondition"] = failure
    return {"metadata": {"name": "t", "namespace": "triton"}, "spec": {"metrics": [metric]}}


def no_data_problems(success: str | None, failure: str | None) -> list[str]:
    found = violations(TEMPLATE, template(success, failure))
    assert {name for name, _ in found} <= {INCONCLUSIVE_RULE}
    return [message.removeprefix("triton/t: metric 'p95': ") for _, message in found]


@pytest.mark.parametrize(
    ("success", "failure"),
    [
        (GUARD + "result[0] <= 1.2", GUARD + "result[0] > 1.2"),  # the rendered templates' form
        (GUARD + "(result[0] <= 1.2 || result[0] < 0)", GUARD + "result[0] > 1.2"),
        # No isNaN: every comparison with NaN is false, so NaN matches neither condition either.
        ("len(result) > 0 && result[0] <= 1.2", "len(result) > 0 && result[0] > 1.2"),
        ("all(result, {# <= 1.2}) && len(result) == 1", "any(result, # > 1.2)"),
        (
            "len(result) == 1 and not isNaN(result[-1]) and result[-1] <= 1.2",
            "len(result) > 0 && 1.2 < result[0] < 100",
        ),
    ],
    ids=["guarded", "or-in-parentheses", "nan-compares-false", "all-any", "words-negative-index-chained"],
)
def test_conditions_that_leave_no_data_inconclusive_pass(success: str, failure: str) -> None:
    assert no_data_problems(success, failure) == []


@pytest.mark.parametrize(
    ("success", "failure", "problems"),
    [
        (
            "result[0] <= 1.2",
            GUARD + "result[0] > 1.2",
            [
                "on [] the measurement is Error: 'result[0] <= 1.2': index out of range: 0 (array length is 0), "
                "not Inconclusive"
            ],
        ),
        (
            GUARD + "result[0] <= 1.2",
            None,
            [
                "on [] the measurement is Failed, not Inconclusive",
                "on [NaN] the measurement is Failed, not Inconclusive",
            ],
        ),
        (
            None,
            GUARD + "result[0] > 1.2",
            [
                "on [] the measurement is Successful, not Inconclusive",
                "on [NaN] the measurement is Successful, not Inconclusive",
            ],
        ),
        (
            None,
            None,
            [
                "on [] the measurement is Successful, not Inconclusive",
                "on [NaN] the measurement is Successful, not Inconclusive",
            ],
        ),
        # && binds tighter than ||: no data succeeds.
        (
            GUARD + "result[0] <= 1.2 || len(result) == 0",
            GUARD + "result[0] > 1.2",
            ["on [] the measurement is Successful, not Inconclusive"],
        ),
        # !(x > bound) is true for NaN: a NaN ratio would promote.
        (
            "len(result) == 1 && !(result[0] > 1.2)",
            GUARD + "result[0] > 1.2",
            ["on [NaN] the measurement is Successful, not Inconclusive"],
        ),
        (
            GUARD + "result[0] <= 1.2",
            "len(result) == 0 || isNaN(result[0])",
            [
                "on [] the measurement is Failed, not Inconclusive",
                "on [NaN] the measurement is Failed, not Inconclusive",
            ],
        ),
        # expr-lang checks types before it runs: a mistyped branch fails even where && skips it.
        (
            GUARD + "result[0] <= 1.2",
            "len(result) == 1 && result[0] == true",
            [
                f"on {shown} the measurement is Error: 'len(result) == 1 && result[0] == true': invalid operation: == "
                "(mismatched types float and bool), not Inconclusive"
                for shown in ("[]", "[NaN]")
            ]
            + [
                "on [1.0] the measurement is Error: 'len(result) == 1 && result[0] == true': invalid operation: == "
                "(mismatched types float and bool)"
            ],
        ),
        # With data, a second sample that is not there is an error on every measurement.
        (
            GUARD + "result[1] <= 1.2",
            GUARD + "result[0] > 1.2",
            [
                "on [1.0] the measurement is Error: 'len(result) == 1 && !isNaN(result[0]) && result[1] <= 1.2': "
                "index out of range: 1 (array length is 1)"
            ],
        ),
    ],
    ids=[
        "unguarded-index",
        "success-only",
        "failure-only",
        "none",
        "or-no-data",
        "negated-nan",
        "no-data-fails",
        "mistyped",
        "second-sample",
    ],
)
def test_conditions_that_decide_on_no_data_are_named_with_the_phase(
    success: str | None, failure: str | None, problems: list[str]
) -> None:
    assert no_data_problems(success, failure) == problems


@pytest.mark.parametrize("condition", ["asInt(result[0]) > 1", 'result[0] > "1"', "result[0] ?? 0 > 1"])
def test_a_condition_outside_the_evaluated_subset_is_refused_as_unproven(condition: str) -> None:
    (problem,) = no_data_problems(condition, GUARD + "result[0] > 1.2")
    assert problem.startswith(f"cannot be evaluated here ({condition!r}: ")
    assert problem.endswith(" is outside the subset), so no data is not shown to be Inconclusive")


def test_job_metrics_have_no_conditions_to_guard() -> None:
    assert violations(TEMPLATE, template(None, None, provider="job")) == []


TOLERANCE_RULE = "analysis-tolerates-no-failed-or-inconclusive-measurement"


def limited(**limits: object) -> dict:
    guarded = template(GUARD + "result[0] <= 1.2", GUARD + "result[0] > 1.2")
    guarded["spec"]["metrics"][0].update(limits)
    return guarded


@pytest.mark.parametrize("limits", [{}, {"failureLimit": 0}, {"failureLimit": 0, "inconclusiveLimit": 0}])
def test_analysis_without_tolerance_passes(limits: dict) -> None:
    assert violations(TEMPLATE, limited(**limits)) == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("failureLimit", 1),
        ("inconclusiveLimit", 1),
        ("failureLimit", -1),
        ("failureLimit", "{{args.limit}}"),
        ("inconclusiveLimit", "1"),
        ("failureLimit", True),
    ],
    ids=["failure-1", "inconclusive-1", "unlimited", "an-arg", "a-string", "a-bool"],
)
def test_a_tolerance_limit_above_zero_is_refused_naming_the_field(field: str, value: object) -> None:
    assert violations(TEMPLATE, limited(**{field: value})) == [
        (
            TOLERANCE_RULE,
            f"triton/t: spec.metrics[0].{field} ('p95') is {value!r}: must be 0 (or unset), so that no failed"
            " or inconclusive measurement is tolerated",
        )
    ]


def test_job_metrics_are_held_to_no_tolerance_too() -> None:
    job = template(None, None, provider="job")
    job["spec"]["metrics"][0]["failureLimit"] = 1
    assert [name for name, _ in violations(TEMPLATE, job)] == [TOLERANCE_RULE]
