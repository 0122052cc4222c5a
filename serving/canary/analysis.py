"""An AnalysisRun with Argo Rollouts' semantics, outside Kubernetes (the serving lab, a dry run).

What it does as Argo Rollouts' analysis controller does (argoproj/argo-rollouts analysis/analysis.go,
utils/evaluate, metricproviders/prometheus and job, read at v1.9):

- the templates' metrics are merged into one run; `{{args.NAME}}` is replaced everywhere in each
  metric by the run's arguments (the template's `value` unless the caller passes one); an
  argument without a value is an error;
- each metric waits `initialDelay`, then measures every `interval` until `count` measurements
  (no interval and no count: one measurement);
- a Prometheus measurement is the instant query's vector as a list of floats; the metric's
  successCondition and failureCondition (conditions.py) decide Successful (success and not
  failure), Failed (failure) or Inconclusive (neither); a condition that cannot be evaluated or a
  query that fails makes the measurement Error;
- a Job measurement runs the Job's one container; exit 0 is Successful, any other Failed; a Job
  still running when the run terminates is deleted and recorded Inconclusive (the lab waits for
  its process to end, then records it so);
- a metric is Failed once failed > failureLimit, Inconclusive once inconclusive >
  inconclusiveLimit, Error once consecutive errors > consecutiveErrorLimit (default 4), in that
  order of precedence (the later check wins, as in assessMetricFailureInconclusiveOrError), and
  Successful when its count is reached otherwise;
- once any metric is Failed, Error or Inconclusive the run terminates: no new measurements start,
  a metric without any measurement counts as Successful, and the run takes the worst phase
  (Successful < Inconclusive < Error < Failed).

Where the lab differs from a cluster, the difference is a constructor argument, never a change to
a query or a condition: `prometheus_url` replaces the in-cluster Prometheus address, `timing`
scales interval and initialDelay (to keep tests short; a caller scaling them also scales the
arguments that must match them, such as the templates' `window`), and `run_job` runs the Job's container
(the lab runs its command on this machine).
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from serving.canary.conditions import ConditionError, evaluate

SUCCESSFUL, FAILED, INCONCLUSIVE, ERROR = "Successful", "Failed", "Inconclusive", "Error"
_ORDER = [SUCCESSFUL, INCONCLUSIVE, ERROR, FAILED]  # analysisStatusOrder, completed phases only
DEFAULT_CONSECUTIVE_ERROR_LIMIT = 4
_ARG = re.compile(r"\{\{\s*args\.([A-Za-z0-9_.-]+)\s*\}\}")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

Template = Mapping[str, Any]
JobRunner = Callable[[Mapping[str, Any]], tuple[int, str]]  # container -> (exit status, output)


class AnalysisError(ValueError):
    """A template or argument the controller would refuse; the message names the metric and field."""


def duration_seconds(text: str, where: str) -> float:
    """A Go duration as Argo Rollouts accepts it ("30s", "1m", "1m30s", "500ms")."""
    parts = _DURATION.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise AnalysisError(f"{where}: {text!r} is not a duration such as 30s, 1m or 1m30s")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def resolve_args(templates: Sequence[Template], given: Mapping[str, str]) -> dict[str, str]:
    """Every argument the templates declare, with its value: the caller's, else the template's."""
    values: dict[str, str] = {}
    for template in templates:
        name = template.get("metadata", {}).get("name", "?")
        for arg in template.get("spec", {}).get("args", []):
            if arg["name"] in given:
                values[arg["name"]] = given[arg["name"]]
            elif "value" in arg:
                values.setdefault(arg["name"], arg["value"])
            elif arg["name"] not in values:
                raise AnalysisError(f"AnalysisTemplate {name}: argument {arg['name']!r} has no value")
    return values


def substitute(value: Any, args: Mapping[str, str], where: str) -> Any:
    """`{{args.NAME}}` replaced in every string of a metric, recursively."""
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            if match.group(1) not in args:
                raise AnalysisError(f"{where}: {{{{args.{match.group(1)}}}}} is not an argument of the run")
            return args[match.group(1)]

        return _ARG.sub(replace, value)
    if isinstance(value, Mapping):
        return {key: substitute(item, args, where) for key, item in value.items()}
    if isinstance(value, list):
        return [substitute(item, args, where) for item in value]
    return value


@dataclass(frozen=True)
class Timing:
    """The lab's time compression: every wait of the templates multiplied by `scale`."""

    scale: float = 1.0


@dataclass
class Measurement:
    metric: str
    phase: str
    started: float  # seconds since the run started
    value: str
    message: str = ""


@dataclass
class MetricResult:
    name: str
    phase: str = "Pending"
    measurements: list[Measurement] = field(default_factory=list)
    successful: int = 0
    failed: int = 0
    inconclusive: int = 0
    error: int = 0
    consecutive_error: int = 0
    message: str = ""

    @property
    def count(self) -> int:  # errors do not count towards `count`, as in the controller
        return self.successful + self.failed + self.inconclusive


@dataclass
class RunResult:
    phase: str
    message: str
    metrics: list[MetricResult]
    timeline: list[Measurement]


def _int(metric: Mapping[str, Any], key: str, default: int) -> int:
    value = metric.get(key, default)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise AnalysisError(f"metric {metric.get('name')!r}: {key} {value!r} is not an integer") from None


def prometheus_query(url: str, query: str, timeout: float = 10) -> list[float]:
    """The instant query's vector (or scalar) as floats, as the Prometheus provider hands them over."""
    request = f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = json.load(response)
    data = body["data"]
    if data["resultType"] == "vector":
        return [float(sample["value"][1]) for sample in data["result"]]
    if data["resultType"] == "scalar":
        return [float(data["result"][1])]
    raise AnalysisError(f"Prometheus metric type not supported: {data['resultType']}")


def assess(metric: Mapping[str, Any], result: MetricResult) -> str:
    """The metric's phase after its latest measurement (assessMetricStatus)."""
    phase = ""
    if result.failed > _int(metric, "failureLimit", 0) >= 0:
        phase = FAILED
    if result.inconclusive > _int(metric, "inconclusiveLimit", 0):
        phase = INCONCLUSIVE
    if result.consecutive_error > _int(metric, "consecutiveErrorLimit", DEFAULT_CONSECUTIVE_ERROR_LIMIT):
        phase = ERROR
    if phase:
        return phase
    count = effective_count(metric)
    if count is not None and result.count >= count:
        return SUCCESSFUL
    return "Running"


def effective_count(metric: Mapping[str, Any]) -> int | None:
    """`count`, or 1 for a metric with neither count nor interval, or None (runs until stopped)."""
    count = _int(metric, "count", 0)
    if count:
        return count
    return None if metric.get("interval") else 1


class AnalysisRun:
    """One run of the merged templates; `run()` blocks until it completes and returns its result."""

    def __init__(
        self,
        templates: Sequence[Template],
        args: Mapping[str, str],
        prometheus_url: str,
        run_job: JobRunner,
        timing: Timing = Timing(),
        log: Callable[[str], None] = print,
    ) -> None:
        values = resolve_args(templates, args)
        self.metrics: list[dict[str, Any]] = []
        for template in templates:
            name = template.get("metadata", {}).get("name", "?")
            for metric in template.get("spec", {}).get("metrics", []):
                self.metrics.append(
                    substitute(metric, values, f"AnalysisTemplate {name} metric {metric.get('name')!r}")
                )
        if not self.metrics:
            raise AnalysisError("the templates have no metrics")
        self.prometheus_url = prometheus_url
        self.run_job = run_job
        self.timing = timing
        self.log = log
        self.results = {metric["name"]: MetricResult(metric["name"]) for metric in self.metrics}
        self._terminating = threading.Event()
        self._lock = threading.Lock()
        self._started = 0.0

    def _waits(self, metric: Mapping[str, Any]) -> tuple[float, float]:
        where = f"metric {metric['name']!r}"
        waits = [
            duration_seconds(metric[key], f"{where} {key}") if metric.get(key) else 0.0
            for key in ("initialDelay", "interval")
        ]
        return waits[0] * self.timing.scale, waits[1] * self.timing.scale

    def _measure(self, metric: Mapping[str, Any]) -> Measurement:
        started = time.monotonic() - self._started
        provider = metric["provider"]
        try:
            if "prometheus" in provider:
                values = prometheus_query(self.prometheus_url, provider["prometheus"]["query"])
                value = "[" + ",".join(repr(v) for v in values) + "]"
                return Measurement(metric["name"], self._phase(metric, values), started, value)
            if "job" in provider:
                containers = provider["job"]["spec"]["template"]["spec"]["containers"]
                status, output = self.run_job(containers[0])
                if self._terminating.is_set():  # the controller deleted the Job meanwhile (Terminate)
                    return Measurement(metric["name"], INCONCLUSIVE, started, f"exit {status}", "job terminated")
                phase = SUCCESSFUL if status == 0 else FAILED
                return Measurement(metric["name"], phase, started, f"exit {status}", output.strip())
            raise AnalysisError(f"metric {metric['name']!r}: provider {sorted(provider)} is not supported here")
        except (OSError, urllib.error.URLError, ConditionError, KeyError, ValueError) as exc:
            return Measurement(metric["name"], ERROR, started, "", str(exc))

    @staticmethod
    def _phase(metric: Mapping[str, Any], values: list[float]) -> str:
        """EvaluateResult: the two conditions to a measurement phase."""
        success_text, failure_text = metric.get("successCondition", ""), metric.get("failureCondition", "")
        success = evaluate(success_text, values) if success_text else False
        failure = evaluate(failure_text, values) if failure_text else False
        if not success_text and not failure_text:
            return SUCCESSFUL
        if success_text and not failure_text:
            failure = not success
        if failure_text and not success_text:
            success = not failure
        if failure:
            return FAILED
        return SUCCESSFUL if success else INCONCLUSIVE

    def _record(self, metric: Mapping[str, Any], measurement: Measurement) -> str:
        with self._lock:
            result = self.results[metric["name"]]
            result.measurements.append(measurement)
            if measurement.phase == ERROR:
                result.error += 1
                result.consecutive_error += 1
            else:
                result.consecutive_error = 0
                setattr(result, measurement.phase.lower(), getattr(result, measurement.phase.lower()) + 1)
            result.phase = assess(metric, result)
            if result.phase in (FAILED, ERROR, INCONCLUSIVE):
                result.message = f"{measurement.phase}: {measurement.message or measurement.value}"
                self._terminating.set()
            elapsed = measurement.started
            detail = f" {measurement.message}" if measurement.message else ""
            self.log(
                f"  t={elapsed:6.1f}s {metric['name']:<18} {measurement.phase:<12} value={measurement.value}"
                f"{detail} -> metric {result.phase}"
            )
            return result.phase

    def _run_metric(self, metric: Mapping[str, Any]) -> None:
        delay, interval = self._waits(metric)
        if self._terminating.wait(delay):
            return
        while not self._terminating.is_set():
            phase = self._record(metric, self._measure(metric))
            if phase != "Running":
                return
            last = self.results[metric["name"]].measurements[-1]
            # Argo retries an errored measurement after 10 s (DefaultErrorRetryInterval), else `interval`.
            wait = 10.0 * self.timing.scale if last.phase == ERROR else interval
            if self._terminating.wait(wait):
                return

    def run(self) -> RunResult:
        self._started = time.monotonic()
        threads = [threading.Thread(target=self._run_metric, args=(metric,), daemon=True) for metric in self.metrics]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for result in self.results.values():
            if result.phase not in _ORDER:  # stopped by the termination before its count: Successful
                result.phase = SUCCESSFUL
        worst = max(self.results.values(), key=lambda r: _ORDER.index(r.phase) if r.phase in _ORDER else 0)
        timeline = sorted((m for r in self.results.values() for m in r.measurements), key=lambda m: m.started)
        message = "" if worst.phase == SUCCESSFUL else f'Metric "{worst.name}" assessed {worst.phase}: {worst.message}'
        return RunResult(worst.phase, message, list(self.results.values()), timeline)
