"""The one source of the serving stack's recording rules and alerts.

`python -m monitoring build` writes them as a plain rule file (monitoring/generated/rules.yml,
which the serving lab's Prometheus loads), and pulumi/gpu_serving/manifests.py wraps the same
groups in a PrometheusRule for kube-prometheus-stack.

Names follow Prometheus' `level:metric:operations`: `model_version:` keeps the labels model
and version, `namespace_pod:` keeps namespace and pod (what prometheus-adapter maps to pods).

Inputs read at build time, never retyped here: the driver pin (platform_matrix/matrix.yml)
and the models the serving stack must load (the folders of model_repository/).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import platform_matrix
from monitoring import spec, xid_catalog
from monitoring.spec import Group, Rule, alert, group, record
from serving.drift.settings import DRIFT_SHARE

ROOT = Path(__file__).resolve().parents[1]
MODEL_REPOSITORY = ROOT / "model_repository"

TRITON_JOB = "triton"  # the scrape job (the Service's name under the ServiceMonitor)
TRITON_CONTAINER = "triton"  # the container of pulumi/gpu_serving/manifests.py's Deployments
BY_MODEL = "model, version"

# SLOs. Availability: 99.9 % of requests succeed. Latency and queue time are windows-based
# (Triton has no latency histogram): 99 % of evaluation minutes meet the target.
AVAILABILITY_SLO = 0.999
WINDOW_SLO = 0.99
LATENCY_P99_TARGET_US = 500_000
QUEUE_TIME_TARGET_US = 100_000

# Multi-window, multi-burn-rate alerts (Google SRE workbook, "Alerting on SLOs", table 5-8):
# severity -> `for`, and (long window, short window, burn-rate factor) pairs.
BURN_RATES = {
    "page": ("2m", (("1h", "5m", 14.4), ("6h", "30m", 6))),
    "ticket": ("15m", (("1d", "2h", 3), ("3d", "6h", 1))),
}
ERROR_WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")

GPU_TEMPERATURE_C = 85
FRAMEBUFFER_USED_RATIO = 0.95
# The DCGM exporter's scrape job (roles/k8s_addons: the Service's name under its ServiceMonitor),
# and the window over which it counts XIDs and clock events (its DCGM_EXPORTER_*_WINDOW_SIZE,
# which roles/k8s_addons sets to the same value).
DCGM_JOB = "dcgm-exporter"
DCGM_COUNT_WINDOW_MINUTES = 5
# DCGM's own PCIe health watch warns above 8 replays per minute (DCGM_FR_PCI_REPLAY_RATE).
PCIE_REPLAYS_PER_MINUTE = 8
# Share of time a GPU's clocks were held down by its power limit (DCGM_FI_DEV_POWER_VIOLATION
# counts microseconds) before it is a ticket: sustained, a capacity problem, not a blip.
POWER_VIOLATION_SHARE = 0.5
# Clock events that a GPU's hardware or thermal protection forces (the exporter's `clock_event`
# names of DCGM's throttle reasons); idle, application clocks, sync boost and the software power
# cap are normal operation (the power cap has its own alert above).
CLOCK_SLOWDOWNS = ("hw_slowdown", "hw_thermal", "hw_power_brake", "sw_thermal")

# Record names other code reads: the HPA metric (prometheus-adapter), the dashboards.
REQUESTS = "model_version:nv_inference_requests:rate1m"
SUCCESS = "model_version:nv_inference_request_success:rate1m"
FAILURE = "model_version:nv_inference_request_failure:rate1m"
LATENCY_QUANTILES = "model_version_quantile:nv_inference_request_summary_us:max"
QUEUE_TIME = "model_version:nv_inference_queue_duration_us:mean1m"
COMPUTE_TIME = "model_version:nv_inference_compute_infer_duration_us:mean1m"
BATCH_SIZE = "model_version:nv_inference_batch_size:mean1m"
PENDING = "model_version:nv_inference_pending_request_count:sum"
QUEUE_SHARE = "model_version:nv_inference_queue_duration_us:ratio_rate1m"
POD_QUEUE_TIME = "namespace_pod:nv_inference_queue_duration_us:mean1m"
LATENCY_MISS = "model_version:nv_inference_latency_slo_miss:bool"
QUEUE_MISS = "model_version:nv_inference_queue_slo_miss:bool"


def error_ratio(window: str) -> str:
    return f"model_version:nv_inference_request_failure:ratio_rate{window}"


def driver_pin() -> str:
    return platform_matrix.load().driver_version


def expected_models(repository: Path = MODEL_REPOSITORY) -> list[str]:
    """The models Triton must serve: every model_repository/<name>/config.pbtxt."""
    return sorted(config.parent.name for config in repository.glob("*/config.pbtxt"))


def _rate(metric: str, by: str, window: str = "1m") -> str:
    return f"sum by ({by}) (rate({metric}[{window}]))"


def _mean(numerator: str, denominator: str, by: str) -> str:
    """numerator/denominator per request, at any traffic; 0 while there is none (no request
    waited), never a clamped denominator (which misreads every rate below the clamp)."""
    total = _rate(denominator, by)
    return f"(\n  {_rate(numerator, by)}\n  /\n  ({total} > 0)\n)\nor\n({total} == 0)"


def _ratio(numerator: str, denominator: str, by: str) -> str:
    """numerator/denominator, absent while the denominator does not move (no 0/0 NaN)."""
    return f"{_rate(numerator, by)}\n/\n({_rate(denominator, by)} > 0)"


def golden_signals() -> Group:
    success = _rate("nv_inference_request_success", BY_MODEL)
    failure = _rate("nv_inference_request_failure", BY_MODEL)
    return group(
        "triton.rules",
        record(SUCCESS, success),
        record(FAILURE, failure),
        record(REQUESTS, f"{SUCCESS} + {FAILURE}"),
        # Summaries (--metrics-config=summary_latencies=true) do not aggregate: the slowest pod.
        record(
            LATENCY_QUANTILES,
            f'max by ({BY_MODEL}, quantile) (nv_inference_request_summary_us{{quantile=~"0.5|0.95|0.99"}})',
        ),
        record(QUEUE_TIME, _mean("nv_inference_queue_duration_us", "nv_inference_request_success", BY_MODEL)),
        record(COMPUTE_TIME, _mean("nv_inference_compute_infer_duration_us", "nv_inference_request_success", BY_MODEL)),
        record(BATCH_SIZE, _ratio("nv_inference_count", "nv_inference_exec_count", BY_MODEL)),
        # Saturation: requests waiting for a free instance, and the share of time they wait.
        record(PENDING, f"sum by ({BY_MODEL}) (nv_inference_pending_request_count)"),
        record(QUEUE_SHARE, _ratio("nv_inference_queue_duration_us", "nv_inference_request_duration_us", BY_MODEL)),
        # The HPA's metric, per pod (prometheus-adapter serves it as triton_queue_duration_us_per_request).
        record(
            POD_QUEUE_TIME, _mean("nv_inference_queue_duration_us", "nv_inference_request_success", "namespace, pod")
        ),
    )


def slo_records() -> Group:
    rules: list[Rule] = []
    for window in ERROR_WINDOWS:
        failure = _rate("nv_inference_request_failure", BY_MODEL, window)
        success = _rate("nv_inference_request_success", BY_MODEL, window)
        # Absent, not NaN, while the model gets no requests.
        rules.append(record(error_ratio(window), f"{failure}\n/\n(\n  ({success} + {failure}) > 0\n)"))
    rules += [
        record(
            LATENCY_MISS,
            f'max by ({BY_MODEL}) (nv_inference_request_summary_us{{quantile="0.99"}}) > bool {LATENCY_P99_TARGET_US}',
        ),
        record(QUEUE_MISS, f"{QUEUE_TIME} > bool {QUEUE_TIME_TARGET_US}"),
    ]
    return group("triton.slo.rules", *rules)


Series = Callable[[str], str]  # window -> the expression of the SLI over that window


def _burn(long: str, short: str, factor: float, budget: float, series: Series) -> str:
    return f"(\n  {series(long)} > ({factor} * {budget:g})\nand\n  {series(short)} > ({factor} * {budget:g})\n)"


def _burn_alerts(
    name: str, series: Series, budget: float, summary: str, description: str, *, pages: bool = True
) -> list[Rule]:
    """The fast-burn pairs of BURN_RATES as a page and the slow-burn pairs as a ticket; with
    `pages=False` (an SLI that is a cause behind another that pages) one ticket on every pair,
    after the ticket's `for`."""
    if not pages:
        for_ = BURN_RATES["ticket"][0]
        pairs = [pair for _, windows in BURN_RATES.values() for pair in windows]
        expr = "\nor\n".join(_burn(long, short, factor, budget, series) for long, short, factor in pairs)
        return [alert(name, expr, for_=for_, severity="ticket", summary=summary, description=description)]
    rules = []
    for severity, (for_, pairs) in BURN_RATES.items():
        expr = "\nor\n".join(_burn(long, short, factor, budget, series) for long, short, factor in pairs)
        rules.append(alert(name, expr, for_=for_, severity=severity, summary=summary, description=description))
    return rules


def triton_alerts() -> Group:
    up = f'up{{job="{TRITON_JOB}"}}'
    loaded = "\nor\n".join(f'label_replace({up} == 1, "model", "{model}", "", "")' for model in expected_models())
    error_budget = 1 - AVAILABILITY_SLO
    window_budget = 1 - WINDOW_SLO
    return group(
        "triton.alerts",
        alert(
            "TritonDown",
            f"(sum by (job) ({up}) == 0)\nor\n(absent({up}) * 0)",
            for_="1m",
            severity="page",
            summary="No Triton instance answers: inference is down.",
            description="{{ $value }} targets of scrape job {{ $labels.job }} have been up for a minute:"
            " every Triton pod is down, or none exists.",
        ),
        alert(
            "TritonInstanceDown",
            f"{up} == 0",
            for_="15m",
            severity="ticket",
            summary="A Triton pod has not answered scrapes for 15 minutes.",
            description="{{ $labels.namespace }}/{{ $labels.pod }} ({{ $labels.instance }}) is down"
            " (up {{ $value }}): crash loop, or a startup past its budget.",
        ),
        alert(
            "TritonNotReady",
            f'(kube_pod_container_status_ready{{container="{TRITON_CONTAINER}"}} == 0)\n'
            f"and on (namespace, pod)\n({up} == 1)",
            for_="1m",
            severity="ticket",
            summary="A started Triton pod is not ready: it serves no traffic.",
            description="{{ $labels.namespace }}/{{ $labels.pod }} answers metrics but its readiness probe fails"
            " (ready {{ $value }}): under --strict-readiness a model is not ready.",
        ),
        alert(
            "TritonModelNotLoaded",
            f"(\n{loaded}\n)\nunless on (instance, model)\n  count by (instance, model) (nv_inference_request_success)",
            for_="2m",
            severity="page",
            summary="A model of model_repository/ is not loaded on a running Triton.",
            description="Triton {{ $labels.instance }} ({{ $labels.pod }}) is up ({{ $value }}) but exports no"
            " metrics for model {{ $labels.model }}: its load failed or it was unloaded.",
        ),
        *_burn_alerts(
            "TritonModelErrorBudgetBurn",
            error_ratio,
            error_budget,
            "A model fails requests fast enough to spend its error budget.",
            "{{ $labels.model }} version {{ $labels.version }} fails {{ $value | humanizePercentage }} of its"
            f" requests (long window); the SLO allows {error_budget:.1%}.",
            pages=False,
        ),
        *_burn_alerts(
            "TritonModelLatencySLOBurn",
            lambda window: f"avg_over_time({LATENCY_MISS}[{window}])",
            window_budget,
            "A model's P99 latency misses its target too often.",
            "{{ $labels.model }} version {{ $labels.version }}: P99 above"
            f" {LATENCY_P99_TARGET_US / 1000:g} ms in {{{{ $value | humanizePercentage }}}} of the minutes"
            f" (long window); the SLO allows {window_budget:.0%}.",
            pages=False,
        ),
        *_burn_alerts(
            "TritonModelQueueSLOBurn",
            lambda window: f"avg_over_time({QUEUE_MISS}[{window}])",
            window_budget,
            "A model's requests queue too long, too often.",
            "{{ $labels.model }} version {{ $labels.version }}: mean queue time above"
            f" {QUEUE_TIME_TARGET_US / 1000:g} ms in {{{{ $value | humanizePercentage }}}} of the minutes"
            f" (long window); the SLO allows {window_budget:.0%}.",
        ),
    )


def gpu_alerts() -> Group:
    gpu = "{{ $labels.node }} GPU {{ $labels.gpu }} ({{ $labels.modelName }})"
    return group(
        "gpu.alerts",
        alert(
            "GpuTemperatureHigh",
            f"DCGM_FI_DEV_GPU_TEMP > {GPU_TEMPERATURE_C}",
            for_="10m",
            severity="ticket",
            summary="A GPU runs hot: it will slow down.",
            description=f"{gpu} has been above {GPU_TEMPERATURE_C} °C for 10 minutes ({{{{ $value }}}} °C).",
        ),
        *_xid_alerts(gpu),
        alert(
            "GpuEccDoubleBitError",
            "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m]) > 0",
            for_="0m",
            severity="page",
            summary="A GPU had uncorrectable (double-bit) ECC errors.",
            description=f"{gpu}: {{{{ $value }}}} double-bit ECC errors in 10 minutes; its work may be corrupt.",
        ),
        alert(
            "GpuRowRemapFailure",
            "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0",
            for_="0m",
            severity="page",
            summary="A GPU could not remap a failing memory row.",
            description=f"{gpu} reports a row remapping failure ({{{{ $value }}}}): the GPU needs replacing.",
        ),
        alert(
            "GpuRowRemapPending",
            "DCGM_FI_DEV_ROW_REMAP_PENDING > 0",
            for_="5m",
            severity="ticket",
            summary="A GPU has a row remapping pending: it needs a reset.",
            description=f"{gpu} has a pending row remap ({{{{ $value }}}}); drain the node and reset the GPU.",
        ),
        alert(
            "GpuFramebufferMemoryPressure",
            f"DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) > {FRAMEBUFFER_USED_RATIO}",
            for_="15m",
            severity="ticket",
            summary="A GPU's memory is nearly full.",
            description=f"{gpu} uses {{{{ $value | humanizePercentage }}}} of its framebuffer.",
        ),
        alert(
            "GpuAllocatedIdle",
            'avg_over_time(DCGM_FI_DEV_GPU_UTIL{exported_pod!=""}[1h]) < 1',
            for_="30m",
            severity="ticket",
            summary="A GPU is allocated to a pod that does not use it.",
            description=f"{gpu} is allocated to {{{{ $labels.exported_namespace }}}}/{{{{ $labels.exported_pod }}}}"
            " but averaged {{ $value }} % utilisation over the last hour.",
        ),
        *_gpu_link_and_clock_alerts(gpu),
        alert(
            "DcgmExporterDown",
            f'up{{job="{DCGM_JOB}"}} == 0',
            for_="10m",
            severity="ticket",
            summary="A node's DCGM exporter is down: its GPUs' faults go unseen.",
            description="The DCGM exporter on {{ $labels.node }} ({{ $labels.instance }}) has not answered"
            " Prometheus for 10 minutes (up = {{ $value }}); no GPU alert can fire for that node.",
        ),
        alert(
            "GpuMissingFromNode",
            "count by (node) (DCGM_FI_DEV_GPU_TEMP)\n<\nmax_over_time(count by (node) (DCGM_FI_DEV_GPU_TEMP)[1d:5m])",
            for_="10m",
            severity="ticket",
            summary="A node reports fewer GPUs than it did during the last day.",
            description="{{ $labels.node }} reports {{ $value }} GPU(s), fewer than it had in the last day: a GPU"
            " fell off the bus or failed to initialise.",
        ),
    )


def _chunks(xids: tuple[int, ...], size: int = 12) -> list[tuple[int, ...]]:
    """XIDs in groups short enough for one line of the rule file each."""
    return [xids[start : start + size] for start in range(0, len(xids), size)]


def _xid_alerts(gpu: str) -> list[Rule]:
    """One alert per kind of answer that NVIDIA's XID catalogue gives (monitoring/xid_catalog.py),
    from the exporter's count of each XID in its window: every occurrence counts, a repeated XID
    included, and the `nvidia_action` label names the catalogue's immediate action."""
    counted = "DCGM_EXP_XID_ERRORS_COUNT"
    window = f"{DCGM_COUNT_WINDOW_MINUTES} minutes"

    def by_action(buckets: dict[str, tuple[int, ...]]) -> str:
        return "\nor\n".join(
            f'label_replace({counted}{{xid=~"{xid_catalog.matcher(chunk)}"}} > 0, "nvidia_action", "{action}", "", "")'
            for action, xids in buckets.items()
            for chunk in _chunks(xids)
        )

    # In the order Prometheus keeps matchers of one label (by value), so that the loaded rule reads
    # as generated (the serving lab compares them).
    excluded = sorted(xid_catalog.matcher(chunk) for chunk in _chunks(xid_catalog.known()))
    unexpected = ",\n  ".join(['xid!=""', *(f'xid!~"{values}"' for values in excluded)])
    reported = f"{gpu} reported XID {{{{ $labels.xid }}}} {{{{ $value }}}} time(s) in the last {window}"
    return [
        alert(
            "GpuXidOutOfService",
            by_action(xid_catalog.OUT_OF_SERVICE),
            for_="0m",
            severity="page",
            summary="A GPU reported an XID that takes it out of service until a reset or restart.",
            description=f"{reported}; NVIDIA's catalogue: {{{{ $labels.nvidia_action }}}}.",
        ),
        alert(
            "GpuXidApplicationFault",
            by_action(xid_catalog.APPLICATION),
            for_="0m",
            severity="ticket",
            summary="A GPU reported an XID that killed an application's CUDA context.",
            description=f"{reported}; NVIDIA's catalogue: {{{{ $labels.nvidia_action }}}} (the GPU itself is fine).",
        ),
        alert(
            "GpuXidUnexpected",
            f"{counted}{{\n  {unexpected}\n}} > 0",
            for_="0m",
            severity="ticket",
            summary="A GPU reported an XID that NVIDIA's catalogue does not expect in service.",
            description=f"{reported}; look it up in NVIDIA's XID catalogue.",
        ),
    ]


def _gpu_link_and_clock_alerts(gpu: str) -> list[Rule]:
    """NVLink and PCIe errors, and clocks held down by the power limit or by protection."""
    slowdowns = "|".join(CLOCK_SLOWDOWNS)
    return [
        alert(
            "GpuNvlinkErrors",
            "increase(DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL[10m]) > 0\nor\n"
            "increase(DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL[10m]) > 0",
            for_="30m",
            severity="ticket",
            summary="A GPU's NVLinks keep retrying or recovering transfers.",
            description=f"{gpu} has counted NVLink replay or recovery errors in every 10 minutes for half an hour"
            " ({{ $value }} in the last 10 minutes): a link is degrading.",
        ),
        alert(
            "GpuPcieReplays",
            f"rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER[5m]) * 60 > {PCIE_REPLAYS_PER_MINUTE}",
            for_="10m",
            severity="ticket",
            summary="A GPU's PCIe link keeps replaying transfers.",
            description=f"{gpu} replays {{{{ $value | humanize }}}} PCIe transfers per minute, above DCGM's health"
            f" limit of {PCIE_REPLAYS_PER_MINUTE}, for 10 minutes.",
        ),
        alert(
            "GpuPowerCapped",
            f"rate(DCGM_FI_DEV_POWER_VIOLATION[10m]) / 1e+06 > {POWER_VIOLATION_SHARE}",
            for_="15m",
            severity="ticket",
            summary="A GPU spends most of its time held down by its power limit.",
            description=f"{gpu} had its clocks held down by its power limit {{{{ $value | humanizePercentage }}}}"
            " of the time, for 15 minutes.",
        ),
        alert(
            "GpuClockSlowdown",
            f'DCGM_EXP_CLOCK_EVENTS_COUNT{{clock_event=~"{slowdowns}"}} > 0',
            for_="15m",
            severity="ticket",
            summary="A GPU's hardware or thermal protection keeps slowing its clocks.",
            description=f"{gpu} had {{{{ $value }}}} {{{{ $labels.clock_event }}}} clock event(s) in each"
            f" {DCGM_COUNT_WINDOW_MINUTES}-minute window for 15 minutes.",
        ),
    ]


def node_alerts() -> Group:
    return group(
        "node.alerts",
        alert(
            "CgroupLimiterThrottledLong",
            "cgroup_limiter_pod_throttled == 1",
            for_="30m",
            severity="ticket",
            summary="The limiter has throttled a pod's IO for 30 minutes.",
            description="{{ $labels.node }}: {{ $labels.exported_namespace }}/{{ $labels.exported_pod }} has been"
            " throttled on {{ $labels.device }} ({{ $labels.direction }}) for 30 minutes ({{ $value }}).",
        ),
        alert(
            "GpuDriverVersionDrift",
            "count by (node, DCGM_FI_DRIVER_VERSION) "
            f'(DCGM_FI_DEV_GPU_TEMP{{DCGM_FI_DRIVER_VERSION!="{driver_pin()}"}})',
            for_="1h",
            severity="ticket",
            summary="A node runs another NVIDIA driver than the platform matrix pins.",
            description="{{ $labels.node }} runs driver {{ $labels.DCGM_FI_DRIVER_VERSION }} on {{ $value }} GPU(s);"
            f" platform_matrix/matrix.yml pins {driver_pin()}.",
        ),
    )


# The drift agent (serving/drift): its scrape job (the Service's name under its ServiceMonitor),
# and how long a drift must last before it is a ticket (serving/drift/README.md, "Thresholds").
DRIFT_JOB = "drift-agent"
DRIFT_FOR = "15m"


def drift_alerts() -> Group:
    return group(
        "drift.alerts",
        alert(
            "ModelInputDrift",
            f"model_drift_drifted_features_share >= {DRIFT_SHARE:g}",
            for_=DRIFT_FOR,
            severity="ticket",
            summary="A model's inputs no longer look like its reference window.",
            description="{{ $labels.model }}: {{ $value | humanizePercentage }} of its drift features failed"
            f" Evidently's drift test for {DRIFT_FOR} (the alert starts at {DRIFT_SHARE:.0%}); its answers may"
            " no longer be as good as when it was released.",
        ),
        alert(
            "ModelDriftAgentFailing",
            "sum by (model, stage) (increase(model_drift_errors_total[10m])) > 0",
            for_="15m",
            severity="ticket",
            summary="The drift agent keeps failing for a model: its drift is not watched.",
            description="{{ $labels.model }}: {{ $value }} failed {{ $labels.stage }} steps in 10 minutes, for"
            " 15 minutes (pull: gateway unreachable; features: the reference's names differ from the gateway's;"
            " evaluate: Evidently failed).",
        ),
        alert(
            "ModelDriftAgentDown",
            f'up{{job="{DRIFT_JOB}"}} == 0',
            for_="15m",
            severity="ticket",
            summary="The drift agent has not answered scrapes for 15 minutes: no model's drift is watched.",
            description="{{ $labels.namespace }}/{{ $labels.pod }} ({{ $labels.instance }}) is down (up {{ $value }}).",
        ),
    )


# The gateway (serving/gateway): its scrape job (the Service's name under its ServiceMonitor), the
# edge records, and what the alerts allow. Its latency target is Triton's P99 target: an edge P95
# above it means the SLO is gone for clients whatever Triton reports.
GATEWAY_JOB = "gateway"
GATEWAY_REQUESTS = "model_code:gateway_requests:rate5m"
GATEWAY_5XX_RATIO = "model:gateway_requests_5xx:ratio_rate5m"
GATEWAY_LATENCY_P95 = "model:gateway_request_duration_seconds:p95_rate5m"
GATEWAY_REJECTIONS = "model_reason:gateway_rejections:rate5m"
GATEWAY_LATENCY_P95_TARGET_S = LATENCY_P99_TARGET_US / 1_000_000
# The SLOs clients see, from the gateway's own counters and histogram. Availability: 99.9 % of
# the requests are answered neither 5xx nor 429 (a refusal for overload is unavailability to the
# client). Latency: 99 % of the successful (2xx) requests are answered within the target, a bucket
# bound of the gateway's histogram (serving/gateway/metrics.py: LATENCY_BUCKETS). Both over
# BUDGET_PERIOD, which the budget-remaining records cover.
GATEWAY_AVAILABILITY_SLO = AVAILABILITY_SLO
GATEWAY_LATENCY_SLO = WINDOW_SLO
GATEWAY_LATENCY_TARGET_S = 0.5
GATEWAY_BAD_CODES = "5..|429"
BUDGET_PERIOD = "30d"


def gateway_error_ratio(window: str) -> str:
    return f"model:gateway_requests_unavailable:ratio_rate{window}"


def gateway_slow_ratio(window: str) -> str:
    return f"model:gateway_requests_slow:ratio_rate{window}"


GATEWAY_AVAILABILITY_BUDGET = f"model:gateway_availability_budget_remaining:ratio{BUDGET_PERIOD}"
GATEWAY_LATENCY_BUDGET = f"model:gateway_latency_budget_remaining:ratio{BUDGET_PERIOD}"


def _gateway_code_ratio(codes: str, window: str) -> str:
    """Requests answered with a code matching `codes` over all requests in `window`; absent, not
    NaN, while there are none. A code's series exists only once the gateway answered it, so none
    yet is 0, not absent."""
    total = f"sum by (model) (rate(gateway_requests_total[{window}]))"
    matching = f'(sum by (model) (rate(gateway_requests_total{{code=~"{codes}"}}[{window}])) or {total} * 0)'
    return f"{matching}\n/\n({total} > 0)"


def _gateway_unavailable(window: str) -> str:
    """Requests answered 5xx or 429 over all requests in `window`."""
    return _gateway_code_ratio(GATEWAY_BAD_CODES, window)


def _gateway_slow(window: str) -> str:
    """Successful requests slower than the target over all successful ones; absent while none."""
    ok = 'code=~"2.."'
    bucket = f'gateway_request_duration_seconds_bucket{{{ok},le="{GATEWAY_LATENCY_TARGET_S:g}"}}'
    fast = f"sum by (model) (rate({bucket}[{window}]))"
    total = f"sum by (model) (rate(gateway_request_duration_seconds_count{{{ok}}}[{window}]))"
    return f"1 - (\n  {fast}\n  /\n  ({total} > 0)\n)"


def gateway_slo_records() -> Group:
    rules = [record(gateway_error_ratio(window), _gateway_unavailable(window)) for window in ERROR_WINDOWS]
    rules += [record(gateway_slow_ratio(window), _gateway_slow(window)) for window in ERROR_WINDOWS]
    # The share of the period's error budget not yet spent (1: untouched, 0: spent, below 0: overspent).
    for name, series, slo in (
        (GATEWAY_AVAILABILITY_BUDGET, _gateway_unavailable, GATEWAY_AVAILABILITY_SLO),
        (GATEWAY_LATENCY_BUDGET, _gateway_slow, GATEWAY_LATENCY_SLO),
    ):
        rules.append(record(name, f"1 - (\n{series(BUDGET_PERIOD)}\n) / {1 - slo:g}"))
    return group("gateway.slo.rules", *rules)


def gateway_rules() -> Group:
    return group(
        "gateway.rules",
        record(GATEWAY_REQUESTS, "sum by (model, code) (rate(gateway_requests_total[5m]))"),
        record(GATEWAY_5XX_RATIO, _gateway_code_ratio("5..", "5m")),
        record(
            GATEWAY_LATENCY_P95,
            "histogram_quantile(0.95, sum by (model, le) (rate(gateway_request_duration_seconds_bucket[5m])))",
        ),
        record(GATEWAY_REJECTIONS, "sum by (model, reason) (rate(gateway_rejections_total[5m]))"),
    )


def gateway_alerts() -> Group:
    up = f'up{{job="{GATEWAY_JOB}"}}'
    return group(
        "gateway.alerts",
        alert(
            "GatewayDown",
            f"sum by (job) ({up}) == 0",
            for_="1m",
            severity="page",
            summary="No gateway instance answers: clients cannot reach any model.",
            description="{{ $value }} targets of scrape job {{ $labels.job }} have been up for a minute.",
        ),
        *_burn_alerts(
            "GatewayAvailabilityBudgetBurn",
            gateway_error_ratio,
            1 - GATEWAY_AVAILABILITY_SLO,
            "Clients get 5xx or 429 for a model fast enough to spend its error budget.",
            "{{ $labels.model }}: {{ $value | humanizePercentage }} of the requests at the gateway were answered 5xx"
            f" or 429 (long window); the SLO allows {1 - GATEWAY_AVAILABILITY_SLO:.1%}.",
        ),
        *_burn_alerts(
            "GatewayLatencyBudgetBurn",
            gateway_slow_ratio,
            1 - GATEWAY_LATENCY_SLO,
            "Clients wait longer than the latency target for a model too often.",
            "{{ $labels.model }}: {{ $value | humanizePercentage }} of the successful requests took longer than"
            f" {GATEWAY_LATENCY_TARGET_S:g} s at the gateway (long window);"
            f" the SLO allows {1 - GATEWAY_LATENCY_SLO:.0%}.",
        ),
        alert(
            "GatewayOverloaded",
            f'{GATEWAY_REJECTIONS}{{reason=~"overloaded|triton_overloaded"}} > 0',
            for_="10m",
            severity="ticket",
            summary="The gateway answers 429: its own bound, or the model's queue at Triton, is full.",
            description="{{ $labels.model }}: {{ $value }} requests per second refused with 429"
            " ({{ $labels.reason }}) for 10 minutes.",
        ),
    )


# Argo Rollouts' controller (v1.9, controller/metrics/rollouts.go): `rollout_info` is 1 for each
# Rollout, its `phase` label the controller's reading of the Progressing condition: Completed,
# Progressing, Paused (a pause step, or an inconclusive analysis waiting for a person), Abort (an
# analysis failed or someone aborted), Timeout, Error, InvalidSpec. The chart's ServiceMonitor
# (pulumi/gpu_serving/charts.py) has Prometheus scrape it.
ROLLOUT_PAUSED_FOR = "30m"


def rollout_alerts() -> Group:
    return group(
        "rollout.alerts",
        alert(
            "RolloutAborted",
            'max by (namespace, name) (rollout_info{phase="Abort"}) == 1',
            for_="0m",
            severity="ticket",
            summary="A canary release was aborted: all traffic is back on the stable pods.",
            description="{{ $labels.namespace }}/{{ $labels.name }}: Argo Rollouts aborted the canary"
            " ({{ $value }}); the Rollout's template names the rejected release until git names another.",
        ),
        alert(
            "RolloutPausedLong",
            'max by (namespace, name) (rollout_info{phase="Paused"}) == 1',
            for_=ROLLOUT_PAUSED_FOR,
            severity="ticket",
            summary="A canary release has waited for a person for 30 minutes.",
            description="{{ $labels.namespace }}/{{ $labels.name }} has been paused for"
            f" {ROLLOUT_PAUSED_FOR} ({{{{ $value }}}}): an inconclusive analysis (no data) or a pause"
            " without a duration waits for promote or abort.",
        ),
        alert(
            "RolloutFailing",
            'max by (namespace, name, phase) (rollout_info{phase=~"Error|Timeout|InvalidSpec"}) == 1',
            for_="5m",
            severity="ticket",
            summary="Argo Rollouts cannot roll a Rollout forward (error, timeout or invalid spec).",
            description="{{ $labels.namespace }}/{{ $labels.name }} is in phase {{ $labels.phase }}"
            " ({{ $value }}) for 5 minutes.",
        ),
    )


def heartbeat() -> Group:
    """Watchdog always fires, so Alertmanager notifies the heartbeat receiver every minute: when
    the notifications stop, the dead man's switch behind that receiver raises its own alarm (a
    dead Prometheus or Alertmanager cannot page). kube-prometheus-stack's own Watchdog is disabled
    (pulumi/gpu_serving/charts.py), so this one is the only one."""
    return group(
        "heartbeat",
        alert(
            spec.HEARTBEAT_ALERT,
            "vector(1)",
            for_="0m",
            severity=spec.HEARTBEAT_SEVERITY,
            summary="Always firing: the heartbeat of the alerting pipeline.",
            description="Value {{ $value }}, cluster {{ $labels.cluster }}: Prometheus evaluates rules and"
            " Alertmanager delivers them; the heartbeat receiver alarms when these notifications stop.",
        ),
    )


def groups() -> list[Group]:
    return [
        golden_signals(),
        slo_records(),
        triton_alerts(),
        gpu_alerts(),
        node_alerts(),
        drift_alerts(),
        gateway_rules(),
        gateway_slo_records(),
        gateway_alerts(),
        rollout_alerts(),
        heartbeat(),
    ]
