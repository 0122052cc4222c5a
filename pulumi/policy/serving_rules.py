"""The serving stack's policies as plain functions over a resource's type token and properties.

Each rule yields violation messages. The policy pack (__main__.py) reports them through
pulumi-policy; the tests, and tests/pulumi against the rendered manifests, call them directly
with dicts, so they need neither the engine nor pulumi-policy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from analysis_conditions import ERROR, INCONCLUSIVE, UnsupportedCondition, measure

Props = Mapping[str, Any]
Rule = Callable[[str, Props], Iterator[str]]

GPU = "nvidia.com/gpu"
OURS = ("app.kubernetes.io/part-of", "gpu-serving")
_EXACT_VERSION = re.compile(r"^v?\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?$")
# Pod template location per workload kind.
_POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "Rollout": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
_APPLICATION = "kubernetes:argoproj.io/v1alpha1:Application"
_ROLLOUT = "kubernetes:argoproj.io/v1alpha1:Rollout"
_ANALYSIS_TEMPLATES = (
    "kubernetes:argoproj.io/v1alpha1:AnalysisTemplate",
    "kubernetes:argoproj.io/v1alpha1:ClusterAnalysisTemplate",
)
# What a Prometheus query returns when there is no data: an empty vector, or one NaN sample (a
# ratio of two empty rates). Each must leave both conditions false: Inconclusive.
NO_DATA: dict[str, list[float]] = {"[]": [], "[NaN]": [math.nan]}
A_SAMPLE = [1.0]  # a measurement with data: both conditions must at least evaluate on it
_CHART_TYPES = ("kubernetes:helm.sh/v4:Chart", "kubernetes:helm.sh/v3:Chart", "kubernetes:helm.sh/v3:Release")


def type_token(obj: Props) -> str:
    """The Pulumi type of a Kubernetes object: apps/v1 Deployment -> kubernetes:apps/v1:Deployment."""
    api_version = obj["apiVersion"]
    group_version = api_version if "/" in api_version else f"core/{api_version}"
    return f"kubernetes:{group_version}:{obj['kind']}"


def _kind(resource_type: str) -> str:
    return resource_type.rsplit(":", 1)[-1]


def _name(props: Props) -> str:
    metadata = props.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '?')}".lstrip("/")


def _pod_spec(resource_type: str, props: Props) -> Props | None:
    if not resource_type.startswith("kubernetes:"):
        return None
    path = _POD_SPEC_PATHS.get(_kind(resource_type))
    node: Any = props
    for key in path or ():
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if path and isinstance(node, Mapping) else None


def _containers(pod: Props) -> Iterator[Props]:
    yield from pod.get("initContainers") or []
    yield from pod.get("containers") or []


def _is_ours(props: Props) -> bool:
    labels = (props.get("metadata") or {}).get("labels") or {}
    return labels.get(OURS[0]) == OURS[1]


def requests_and_limits(resource_type: str, props: Props) -> Iterator[str]:
    """Every container of our workloads sets CPU and memory requests and limits."""
    pod = _pod_spec(resource_type, props)
    if pod is None or not _is_ours(props):
        return
    for container in _containers(pod):
        resources = container.get("resources") or {}
        for section in ("requests", "limits"):
            missing = [r for r in ("cpu", "memory") if r not in (resources.get(section) or {})]
            if missing:
                yield f"{_name(props)}: container {container.get('name')} has no {section} for {', '.join(missing)}"


def probes(resource_type: str, props: Props) -> Iterator[str]:
    """Every long-running container of our workloads has liveness and readiness probes."""
    pod = _pod_spec(resource_type, props)
    if pod is None or not _is_ours(props) or _kind(resource_type) in ("Job", "CronJob"):
        return
    for container in pod.get("containers") or []:
        for probe in ("livenessProbe", "readinessProbe"):
            if not container.get(probe):
                yield f"{_name(props)}: container {container.get('name')} has no {probe}"


def gpu_placement(resource_type: str, props: Props) -> Iterator[str]:
    """A pod that asks for GPUs has a node selector and tolerates the GPU nodes' taint."""
    pod = _pod_spec(resource_type, props)
    if pod is None:
        return
    wants_gpu = any(
        GPU in ((c.get("resources") or {}).get(section) or {})
        for c in _containers(pod)
        for section in ("limits", "requests")
    )
    if not wants_gpu:
        return
    affinity = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not pod.get("nodeSelector") and not affinity:
        yield f"{_name(props)}: requests {GPU} but has no nodeSelector (or required node affinity) for GPU nodes"
    tolerations = pod.get("tolerations") or []
    if not any(t.get("key") == GPU or (t.get("operator") == "Exists" and not t.get("key")) for t in tolerations):
        yield f"{_name(props)}: requests {GPU} but does not tolerate the {GPU} taint"


def _tag(image: str) -> str | None:
    """The tag of an image reference; None where it has none (a digest alone pins it)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def pinned_images(resource_type: str, props: Props) -> Iterator[str]:
    """No container runs `latest` or an untagged image (a digest counts as pinned)."""
    pod = _pod_spec(resource_type, props)
    if pod is None:
        return
    for container in _containers(pod):
        image = container.get("image") or ""
        tag = _tag(image)
        if "@sha256:" not in image and tag in (None, "latest"):
            yield f"{_name(props)}: container {container.get('name')} image {image!r} is not pinned (tag or digest)"


def pinned_charts(resource_type: str, props: Props) -> Iterator[str]:
    """Helm charts, in Pulumi or in an Argo CD Application, name an exact chart version."""
    if resource_type in _CHART_TYPES:
        version = props.get("version") or ""
        if not _EXACT_VERSION.match(str(version)):
            yield f"chart {props.get('chart')!r} has no exact version (got {version!r})"
    elif resource_type == _APPLICATION:
        spec = props.get("spec") or {}
        for source in [spec.get("source") or {}, *(spec.get("sources") or [])]:
            if source.get("chart") and not _EXACT_VERSION.match(str(source.get("targetRevision") or "")):
                yield (
                    f"{_name(props)}: chart {source['chart']!r} has no exact targetRevision "
                    f"(got {source.get('targetRevision')!r})"
                )


def no_load_balancer(resource_type: str, props: Props) -> Iterator[str]:
    """Only the Istio ingress gateway may be a Service of type LoadBalancer."""
    if resource_type != "kubernetes:core/v1:Service" or (props.get("spec") or {}).get("type") != "LoadBalancer":
        return
    labels = (props.get("metadata") or {}).get("labels") or {}
    if labels.get("istio") != "ingressgateway":
        yield f"{_name(props)}: a LoadBalancer Service outside the Istio ingress gateway (label istio: ingressgateway)"


def application_projects(resource_type: str, props: Props) -> Iterator[str]:
    """An Argo CD Application names its own AppProject: `default` admits every repository,
    namespace and kind."""
    if resource_type != _APPLICATION:
        return
    project = (props.get("spec") or {}).get("project") or "default"
    if project == "default":
        yield f"{_name(props)}: Application in the project 'default': name an AppProject that limits it"


def sync_retry(resource_type: str, props: Props) -> Iterator[str]:
    """An automated Argo CD sync retries with backoff instead of waiting for the next change."""
    if resource_type != _APPLICATION:
        return
    policy = (props.get("spec") or {}).get("syncPolicy") or {}
    backoff = (policy.get("retry") or {}).get("backoff") or {}
    if policy.get("automated") is not None and not backoff.get("duration"):
        yield f"{_name(props)}: automated sync without syncPolicy.retry.backoff"


def _steps(props: Props) -> list[Props] | None:
    canary = ((props.get("spec") or {}).get("strategy") or {}).get("canary")
    return None if canary is None else list(canary.get("steps") or [])


def _analysed(step: Props) -> bool:
    return bool((step.get("analysis") or {}).get("templates"))


def rollout_analysis(resource_type: str, props: Props) -> Iterator[str]:
    """A Rollout measures its canary before every traffic increase: an analysis step after each
    setWeight below 100, before the next setWeight or the end of the steps (where Argo Rollouts
    sends 100%). A blue-green Rollout needs a prePromotionAnalysis."""
    if resource_type != _ROLLOUT:
        return
    strategy = (props.get("spec") or {}).get("strategy") or {}
    if "blueGreen" in strategy:
        if not (strategy["blueGreen"].get("prePromotionAnalysis") or {}).get("templates"):
            yield f"{_name(props)}: blue-green Rollout without a prePromotionAnalysis"
        return
    steps = _steps(props)
    if steps is None:
        yield f"{_name(props)}: Rollout without a canary or blue-green strategy"
        return
    unchecked: tuple[int, Any] | None = None
    for index, step in enumerate(steps):
        if "setWeight" in step:
            if unchecked is not None:
                yield (
                    f"{_name(props)}: steps[{index}] setWeight {step['setWeight']} follows setWeight "
                    f"{unchecked[1]} (steps[{unchecked[0]}]) with no analysis step between them"
                )
            unchecked = (index, step["setWeight"]) if step["setWeight"] != 100 else None
        elif _analysed(step):
            unchecked = None
    if unchecked is not None:
        yield (
            f"{_name(props)}: the steps end after setWeight {unchecked[1]} (steps[{unchecked[0]}]) with no "
            "analysis: Argo Rollouts would send 100% to an unchecked canary"
        )
    elif not any(_analysed(step) for step in steps):
        yield f"{_name(props)}: Rollout without any analysis step"


def rollout_weights(resource_type: str, props: Props) -> Iterator[str]:
    """A Rollout's weights are percentages that only grow and end at 100: the last setWeight is 100,
    or the steps end and Argo Rollouts sends 100% itself. Nothing lowers the canary's share on the
    way, and no maxTrafficWeight turns the weights into something other than percentages."""
    if resource_type != _ROLLOUT:
        return
    routing = (((props.get("spec") or {}).get("strategy") or {}).get("canary") or {}).get("trafficRouting") or {}
    if routing.get("maxTrafficWeight", 100) != 100:
        maximum = routing["maxTrafficWeight"]
        yield f"{_name(props)}: trafficRouting.maxTrafficWeight {maximum}: the weights must be percentages"
    previous = 0
    for index, step in enumerate(_steps(props) or []):
        if "setWeight" not in step:
            continue
        weight = step["setWeight"]  # a float where the engine's protobuf carried it (5.0)
        whole = isinstance(weight, (int, float)) and not isinstance(weight, bool) and weight == int(weight)
        if not whole or not previous < weight <= 100:
            yield f"{_name(props)}: steps[{index}] setWeight {weight!r} must grow from {previous} and stay within 100"
            return
        previous = weight


def _no_data_problems(success: str | None, failure: str | None) -> Iterator[str]:
    try:
        for shown, result in NO_DATA.items():
            outcome = measure(success, failure, result)
            if outcome.phase != INCONCLUSIVE:
                why = f": {outcome.error}" if outcome.error else ""
                yield f"on {shown} the measurement is {outcome.phase}{why}, not {INCONCLUSIVE}"
        outcome = measure(success, failure, A_SAMPLE)
    except UnsupportedCondition as exc:
        yield f"cannot be evaluated here ({exc}), so no data is not shown to be {INCONCLUSIVE}"
        return
    if outcome.phase == ERROR:
        yield f"on {A_SAMPLE} the measurement is {ERROR}: {outcome.error}"


def no_data_is_inconclusive(resource_type: str, props: Props) -> Iterator[str]:
    """Every Prometheus metric of an AnalysisTemplate, its successCondition and failureCondition
    evaluated as Argo Rollouts does (analysis_conditions.py), is Inconclusive on no data (`[]`) and
    on a NaN sample (`[NaN]`): neither condition true and neither failing to evaluate (that is
    Error, which counts towards aborting). With data (one sample) both evaluate."""
    if resource_type not in _ANALYSIS_TEMPLATES:
        return
    for metric in (props.get("spec") or {}).get("metrics") or []:
        if "prometheus" not in (metric.get("provider") or {}):
            continue
        success, failure = metric.get("successCondition"), metric.get("failureCondition")
        for problem in _no_data_problems(success, failure):
            yield f"{_name(props)}: metric {metric.get('name')!r}: {problem}"


_LIMITS = ("failureLimit", "inconclusiveLimit")


def no_tolerated_measurements(resource_type: str, props: Props) -> Iterator[str]:
    """Every metric of an AnalysisTemplate leaves failureLimit and inconclusiveLimit at 0 (unset is
    Argo Rollouts' default 0): one failed measurement fails the metric, one empty one stops it.
    Above zero, [Failed, no data, Successful] promotes; -1 is no limit at all. A value must be a
    literal: an `{{args.*}}` one could be anything at run time."""
    if resource_type not in _ANALYSIS_TEMPLATES:
        return
    for index, metric in enumerate((props.get("spec") or {}).get("metrics") or []):
        for field in _LIMITS:
            value = metric.get(field, 0)
            if value != 0 or isinstance(value, bool):
                yield (
                    f"{_name(props)}: spec.metrics[{index}].{field} ({metric.get('name')!r}) is {value!r}:"
                    " must be 0 (or unset), so that no failed or inconclusive measurement is tolerated"
                )


RULES: dict[str, Rule] = {
    "containers-have-requests-and-limits": requests_and_limits,
    "containers-have-probes": probes,
    "gpu-pods-are-placed-on-gpu-nodes": gpu_placement,
    "images-are-pinned": pinned_images,
    "charts-are-pinned": pinned_charts,
    "no-load-balancer-outside-the-ingress-gateway": no_load_balancer,
    "applications-name-their-project": application_projects,
    "automated-syncs-retry-with-backoff": sync_retry,
    "rollouts-analyse-between-weights": rollout_analysis,
    "rollout-weights-end-at-100": rollout_weights,
    "analysis-treats-no-data-as-inconclusive": no_data_is_inconclusive,
    "analysis-tolerates-no-failed-or-inconclusive-measurement": no_tolerated_measurements,
}


def violations(resource_type: str, props: Props) -> list[tuple[str, str]]:
    """(rule name, message) for every rule that `props` breaks."""
    return [(name, message) for name, rule in RULES.items() for message in rule(resource_type, props)]
