"""Argo Rollouts AnalysisTemplates of Triton's canary, as plain dicts like manifests.py's.

Three templates, one per question, each usable alone in a Rollout step's `analysis.templates`:

- `triton-canary-latency`: the canary's P95 request latency over the stable's, at most
  MAX_P95_RATIO (1.2: "more than 20% above stable's" rolls back).
- `triton-canary-errors`: the canary's failed-request ratio, at most MAX_FAILURE_RATIO, the error
  budget of the availability SLO (monitoring/rules.py: 99.9 % succeed, so 0.1 % may fail). A
  canary above it, once promoted, spends the whole budget by itself; no stable comparison is
  needed for that, and a stable that is itself above the budget does not excuse the canary.
- `triton-canary-accuracy`: a Job runs the golden-set program (`python -m serving.canary.golden`)
  against both tracks; exit 0 passes (canary accuracy >= stable's - 0.5 points).

Why raw Triton metrics and not the recording rules: every recording rule of monitoring/rules.py
aggregates `by (model, version)` and so drops `rollouts_pod_template_hash`, which is the only label
that tells the canary's pods from the stable's. Why this aggregation of the P95: Triton exports
`nv_inference_request_summary_us` as a Prometheus *summary* (`--metrics-config=summary_latencies=true`),
a per-process quantile over a sliding window that cannot be merged across pods (no histogram
buckets in Triton 2.51 for non-decoupled models). The query therefore takes each pod's own P95
and averages them per track (`avg`): the pods of one track run the same model on the same node
type behind Istio's round robin, so each pod's P95 estimates the track's P95 and the mean is the
lower-variance estimate, the same for both tracks and independent of how many pods each has
(`max`, as the dashboards use, grows with the pod count and would favour a one-pod canary against
a many-pod stable). Pods whose summary has no observation in its window report NaN; `>= 0` drops
those series, so an idle pod neither poisons the mean (NaN) nor counts as fast.

No data is never a verdict: every Prometheus query is empty unless the canary served at least
`min-requests` requests in `window` (`and on () ... >= N`), and both conditions start with
`len(result) == 1 && !isNaN(result[0])`, so an empty vector or a NaN satisfies neither condition:
the measurement is Inconclusive (expr-lang would raise on `result[0]` of an empty vector, which
Argo counts as an Error, not as Inconclusive; `&&` short-circuits before it).

No tolerance: every metric sets `failureLimit: 0` and `inconclusiveLimit: 0`, so one failed
measurement ends the run Failed (the Rollout aborts and all traffic returns to stable) and one
empty measurement ends it Inconclusive (the Rollout pauses until a person promotes or aborts it).
With a limit of 1, [Failed, no data, Successful] and [no data, Successful, Successful] were
promoted: a release passed on two measurements of three, one of them possibly a failure. The price
is a re-run when noise fails one measurement of a good release; the policy pack refuses any limit
above zero. `initialDelay` equals `window`, so the first measurement of a step sees a full window
of that step's traffic.

The golden Job's requests reach Triton too (1,000 single-row requests per track with the shipped
golden set), so the accuracy metric waits until the latency and error metrics of its analysis
step have taken their last measurement (GOLDEN_DELAY = initialDelay + (count - 1) * interval +
interval): its requests never overlap them, and in the next step the count windows start after
it (`initialDelay` = `window`, and increase() ignores what happened before a window's first
sample). A canary without traffic ends Inconclusive before the Job ever starts. The price: a
less accurate canary is caught at the end of the 5% step, not before it.

Names the Rollout must match (owned by the Rollout's module): args `stable-hash` / `canary-hash`
(`podTemplateHashValue: Stable` / `Latest`), the Services STABLE_SERVICE / CANARY_SERVICE (the
Rollout's `stableService` / `canaryService`, whose selectors Argo Rollouts pins to each track's
pod hash) that the golden Job calls, and the ServiceAccount GOLDEN_SERVICE_ACCOUNT
(`golden_service_account`), which Triton's AuthorizationPolicy must allow on the gRPC port.
"""

from __future__ import annotations

from typing import Any

from gpu_serving.analysis_names import ACCURACY_TEMPLATE, ERRORS_TEMPLATE, LATENCY_TEMPLATE
from gpu_serving.charts import PROMETHEUS_NAME
from gpu_serving.config import StackConfig
from gpu_serving.manifests import GRPC_PORT, _labels, _meta
from gpu_serving.serving_layer import APP_UID, app_container_security
from monitoring.rules import AVAILABILITY_SLO

Obj = dict[str, Any]

STABLE_SERVICE = "triton-stable"
CANARY_SERVICE = "triton-canary"
GOLDEN_SERVICE_ACCOUNT = "canary-golden"

MAX_P95_RATIO = 1.2
MAX_FAILURE_RATIO = round(1 - AVAILABILITY_SLO, 6)
MAX_ACCURACY_DROP_POINTS = 0.5
# The model whose golden set gates the release (model_repository/<model>/golden.csv); a Rollout
# may pass another `model` arg for a model that ships its own golden set.
MODEL = "text-classifier"
# Per measurement: the PromQL window and the traffic the canary must have served in it. 100
# requests give the P95 five tail samples; at 5 % canary weight that is 33 requests/s in total.
WINDOW = "1m"
MIN_REQUESTS = 100
INTERVAL = "30s"
COUNT = 3
GOLDEN_DELAY = "2m30s"  # after the measurements at 1m, 1m30s and 2m
FAILURE_LIMIT = 0  # one failed measurement fails the metric
INCONCLUSIVE_LIMIT = 0  # one empty/NaN measurement ends it Inconclusive
GOLDEN_DEADLINE_SECONDS = 600
# Where the gateway image keeps the repository's model_repository/ (its WORKDIR is /opt/app).
IMAGE_WORKDIR = "/opt/app"


def _arg(name: str) -> str:
    return "{{args." + name + "}}"


def _selector(track: str, metric: str, *matchers: str) -> str:
    labels = [*matchers, f'model="{_arg("model")}"', f'rollouts_pod_template_hash="{_arg(track)}"']
    return metric + "{" + ",".join(labels) + "}"


def _increase(track: str, metric: str) -> str:
    return f"sum(increase({_selector(track, metric)}[{_arg('window')}]))"


def _p95(track: str) -> str:
    summary = _selector(track, "nv_inference_request_summary_us", 'quantile="0.95"')
    return f"avg({summary} >= 0)"


def latency_query() -> str:
    """Canary P95 / stable P95, empty unless the canary served `min-requests` in `window`."""
    served = _increase("canary-hash", "nv_inference_request_success")
    return (
        f"(\n  {_p95('canary-hash')}\n  /\n  {_p95('stable-hash')}\n)\nand on ()\n{served}\n>= {_arg('min-requests')}\n"
    )


def error_query() -> str:
    """The canary's failed / all requests in `window`, empty unless it served `min-requests`."""
    failed = _increase("canary-hash", "nv_inference_request_failure")
    served = _increase("canary-hash", "nv_inference_request_success")
    total = f"(\n  {served}\n  +\n  {failed}\n)"
    return f"{failed}\n/\n{total}\nand on ()\n{total}\n>= {_arg('min-requests')}\n"


def _data() -> str:
    """True only for a one-element, non-NaN result; guards every comparison (see module doc)."""
    return "len(result) == 1 && !isNaN(result[0])"


def conditions(bound: float) -> tuple[str, str]:
    """(successCondition, failureCondition) for `result[0] <= bound`; no data matches neither."""
    return f"{_data()} && result[0] <= {bound}", f"{_data()} && result[0] > {bound}"


def _args(*extra: Obj) -> list[Obj]:
    return [{"name": "stable-hash"}, {"name": "canary-hash"}, {"name": "model", "value": MODEL}, *extra]


def _prometheus_metric(cfg: StackConfig, name: str, query: str, bound: float) -> Obj:
    success, failure = conditions(bound)
    return {
        "name": name,
        "initialDelay": WINDOW,
        "interval": INTERVAL,
        "count": COUNT,
        "failureLimit": FAILURE_LIMIT,
        "inconclusiveLimit": INCONCLUSIVE_LIMIT,
        "successCondition": success,
        "failureCondition": failure,
        "provider": {"prometheus": {"address": prometheus_address(cfg), "query": query}},
    }


def prometheus_address(cfg: StackConfig) -> str:
    return f"http://{PROMETHEUS_NAME}-prometheus.{cfg.monitoring.namespace}.svc:9090"


def _template(cfg: StackConfig, name: str, args: list[Obj], metric: Obj) -> Obj:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AnalysisTemplate",
        "metadata": _meta(name, cfg.triton.namespace, _labels(name)),
        "spec": {"args": args, "metrics": [metric]},
    }


def _window_args() -> list[Obj]:
    return [{"name": "window", "value": WINDOW}, {"name": "min-requests", "value": str(MIN_REQUESTS)}]


def latency_template(cfg: StackConfig) -> Obj:
    metric = _prometheus_metric(cfg, "p95-latency-ratio", latency_query(), MAX_P95_RATIO)
    return _template(cfg, LATENCY_TEMPLATE, _args(*_window_args()), metric)


def errors_template(cfg: StackConfig) -> Obj:
    metric = _prometheus_metric(cfg, "error-ratio", error_query(), MAX_FAILURE_RATIO)
    return _template(cfg, ERRORS_TEMPLATE, _args(*_window_args()), metric)


def _grpc_address(cfg: StackConfig, service: str) -> str:
    return f"{service}.{cfg.triton.namespace}.svc.cluster.local:{GRPC_PORT}"


def golden_container(cfg: StackConfig) -> Obj:
    """The golden-set program in the gateway image, which carries serving/ and model_repository/."""
    return {
        "name": "golden",
        "image": cfg.gateway.image.ref,
        "imagePullPolicy": "Always",
        "workingDir": IMAGE_WORKDIR,
        "command": ["/opt/venv/bin/python", "-m", "serving.canary.golden"],
        "args": [
            *("--stable", _arg("stable-url")),
            *("--canary", _arg("canary-url")),
            *("--model", _arg("model")),
            *("--golden", f"model_repository/{_arg('model')}/golden.csv"),
            *("--max-drop", str(MAX_ACCURACY_DROP_POINTS)),
        ],
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
        "securityContext": app_container_security(),
    }


def accuracy_template(cfg: StackConfig) -> Obj:
    job = {
        "metadata": {"labels": _labels(GOLDEN_SERVICE_ACCOUNT)},
        "spec": {
            # One attempt: a second run would only repeat the same deterministic comparison.
            "backoffLimit": 0,
            "activeDeadlineSeconds": GOLDEN_DEADLINE_SECONDS,
            "template": {
                # A native sidecar (Istio >= 1.19 on Kubernetes >= 1.28) ends with the Job's
                # container, so the Job completes; the mesh's mTLS still carries its requests.
                "metadata": {
                    "labels": _labels(GOLDEN_SERVICE_ACCOUNT),
                    "annotations": {"sidecar.istio.io/nativeSidecar": "true"},
                },
                "spec": {
                    "serviceAccountName": GOLDEN_SERVICE_ACCOUNT,
                    "restartPolicy": "Never",
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": APP_UID,
                        "runAsGroup": APP_UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [golden_container(cfg)],
                },
            },
        },
    }
    # The Job provider knows only Successful (the Job completed) and Failed (it failed): every
    # non-zero exit, the program's 2 (inconclusive, bad input) included, fails the metric and
    # aborts. Conservative on purpose: an accuracy check that could not run never promotes.
    metric = {
        "name": "golden-accuracy",
        "initialDelay": GOLDEN_DELAY,
        "count": 1,
        "failureLimit": FAILURE_LIMIT,
        "inconclusiveLimit": INCONCLUSIVE_LIMIT,
        "provider": {"job": job},
    }
    urls = [
        {"name": "stable-url", "value": _grpc_address(cfg, STABLE_SERVICE)},
        {"name": "canary-url", "value": _grpc_address(cfg, CANARY_SERVICE)},
    ]
    return _template(cfg, ACCURACY_TEMPLATE, _args(*urls), metric)


def golden_service_account(cfg: StackConfig) -> Obj:
    """The golden Job's identity in the mesh (Triton's AuthorizationPolicy must allow it)."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(GOLDEN_SERVICE_ACCOUNT, cfg.triton.namespace, _labels(GOLDEN_SERVICE_ACCOUNT)),
        "automountServiceAccountToken": False,
    }


def analysis_templates(cfg: StackConfig) -> list[Obj]:
    return [latency_template(cfg), errors_template(cfg), accuracy_template(cfg)]
