"""The Grafana dashboards of the serving stack, built with the Grafana Foundation SDK.

    triton            golden signals per model and version: traffic, errors, latency, queue time
    triton-batching   queue and batch behaviour: batch size, queue vs compute, pending, saturation
    gpu-health        DCGM: temperature, utilisation, framebuffer, XID, ECC row remapping, power
    cgroup-limiter    the IO/CPU limiter agent: IO against limits, throttling, scans, errors
    gateway           the HTTP gateway's edge golden signals: requests by code, 5xx, latency, bound

`build()` writes them to monitoring/generated/dashboards/ (committed; Grafana's sidecar loads
them from ConfigMaps); `check()` says when those files are stale or a panel reads a metric that
no exporter produces (monitoring/metric_names.py says which do).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common, dashboard, prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import units
from grafana_foundation_sdk.models.common import LegendDisplayMode, LegendPlacement
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh, VariableSort

from monitoring.metric_names import ROOT, catalog
from monitoring.rules import (
    BATCH_SIZE,
    COMPUTE_TIME,
    GATEWAY_5XX_RATIO,
    GATEWAY_AVAILABILITY_BUDGET,
    GATEWAY_LATENCY_BUDGET,
    GATEWAY_LATENCY_P95,
    GATEWAY_REJECTIONS,
    GATEWAY_REQUESTS,
    LATENCY_QUANTILES,
    PENDING,
    QUEUE_SHARE,
    QUEUE_TIME,
    REQUESTS,
    error_ratio,
)

GENERATED = Path(__file__).resolve().parent / "generated" / "dashboards"
TAGS = ["gpu-serving"]
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "[$__rate_interval]"

TRITON = '{model=~"$model", version=~"$version"}'
BY_VERSION = "model, version"
NODE = '{node=~"$node"}'
BY_GPU = "node, gpu, modelName"
# The ServiceMonitors of the add-ons keep the target's namespace and pod, so the pod that the
# limiter reports on is in exported_namespace and exported_pod.
BY_POD = "node, exported_namespace, exported_pod"
POD = "{{exported_namespace}}/{{exported_pod}}"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    description: str
    queries: tuple[Query, ...]


Section = tuple[str, tuple[Panel, ...]]


def _label(*labels: str) -> str:
    return " ".join("{{" + label + "}}" for label in labels)


VERSION = _label("model") + " v" + _label("version")
GPU = _label("node") + " GPU " + _label("gpu")


def _rate(metric: str, selector: str, by: str) -> str:
    return f"sum by ({by}) (rate({metric}{selector}{RATE}))"


def _per_request(metric: str) -> str:
    """A cumulative Triton duration (µs) divided by the successful requests it covers."""
    return f"{_rate(metric, TRITON, BY_VERSION)} / {_rate('nv_inference_request_success', TRITON, BY_VERSION)}"


def _record(name: str, legend: str = VERSION, matchers: str = "") -> Query:
    """A recording rule of monitoring/rules.py (kept per model and version), filtered."""
    return Query(f'{name}{{model=~"$model", version=~"$version"{matchers}}}', legend)


def _triton() -> tuple[Section, ...]:
    return (
        (
            "Traffic and errors",
            (
                Panel(
                    "Request rate",
                    units.RequestsPerSecond,
                    "Inference requests per second, successful and failed (1m rate).",
                    (_record(REQUESTS),),
                ),
                Panel(
                    "Error ratio",
                    units.PercentUnit,
                    "Failed requests over all requests (5m); the availability SLO's error ratio.",
                    (_record(error_ratio("5m")),),
                ),
                Panel(
                    "Failures by reason",
                    units.RequestsPerSecond,
                    "Failed requests per second by Triton's reason (REJECTED, CANCELED, BACKEND, OTHER).",
                    (
                        Query(
                            _rate("nv_inference_request_failure", TRITON, f"{BY_VERSION}, reason"),
                            f"{VERSION} {_label('reason')}",
                        ),
                    ),
                ),
            ),
        ),
        (
            "Latency",
            (
                Panel(
                    "Request latency P50 / P95 / P99",
                    units.Microseconds,
                    "End-to-end request time inside Triton (queue and compute), from its summary metric "
                    "(--metrics-config summary_latencies=true); summaries do not aggregate, so the slowest pod's.",
                    tuple(
                        _record(LATENCY_QUANTILES, f"{VERSION} {label}", f', quantile="{quantile}"')
                        for quantile, label in (("0.5", "P50"), ("0.95", "P95"), ("0.99", "P99"))
                    ),
                ),
                Panel(
                    "Queue time per request",
                    units.Microseconds,
                    "Average time a successful request waited in the scheduler queue (1m); the HPA scales on it.",
                    (_record(QUEUE_TIME),),
                ),
            ),
        ),
    )


def _batching() -> tuple[Section, ...]:
    executions = _rate("nv_inference_exec_count", TRITON, BY_VERSION)
    compute = ("input", "infer", "output")
    busy = " + ".join(f"rate(nv_inference_compute_{step}_duration_us{TRITON}{RATE})" for step in compute)
    return (
        (
            "Batching",
            (
                Panel(
                    "Batch size achieved",
                    units.Short,
                    "Inferences per model execution (1m): how full the dynamic batches are.",
                    (_record(BATCH_SIZE),),
                ),
                Panel(
                    "Executions per second",
                    units.OpsPerSecond,
                    "Model executions (batches) per second.",
                    (Query(executions, VERSION),),
                ),
            ),
        ),
        (
            "Queue and compute",
            (
                Panel(
                    "Queue vs compute time per request",
                    units.Microseconds,
                    "Average time of a successful request in the queue and in each compute step: input "
                    "copies, inference, output copies.",
                    (
                        _record(QUEUE_TIME, f"{VERSION} queue"),
                        Query(_per_request("nv_inference_compute_input_duration_us"), f"{VERSION} input"),
                        _record(COMPUTE_TIME, f"{VERSION} infer"),
                        Query(_per_request("nv_inference_compute_output_duration_us"), f"{VERSION} output"),
                    ),
                ),
                Panel(
                    "Pending requests",
                    units.Short,
                    "Requests received and not yet executing, summed over pods.",
                    (_record(PENDING),),
                ),
            ),
        ),
        (
            "Saturation",
            (
                Panel(
                    "Busy instances",
                    units.Short,
                    "Model instances busy on average: compute time per second, counted once per "
                    "execution (every request of a batch reports the batch's compute time). Compare "
                    "with the instance_group count of the model's config.",
                    (
                        Query(
                            f"sum by ({BY_VERSION}) ({busy}) / 1e6 * {executions}"
                            f" / {_rate('nv_inference_request_success', TRITON, BY_VERSION)}",
                            VERSION,
                        ),
                    ),
                ),
                Panel(
                    "Queue share of request time",
                    units.PercentUnit,
                    "Time waiting for a free instance over the whole request time (1m): near 1, every "
                    "instance is busy and requests queue.",
                    (_record(QUEUE_SHARE),),
                ),
            ),
        ),
    )


def _gpu(metric: str) -> str:
    return f"max by ({BY_GPU}) ({metric}{NODE})"


def _gpu_health() -> tuple[Section, ...]:
    return (
        (
            "Load",
            (
                Panel(
                    "GPU utilisation",
                    units.Percent,
                    "Time a kernel was running (DCGM_FI_DEV_GPU_UTIL), and the memory copy engine's.",
                    (
                        Query(_gpu("DCGM_FI_DEV_GPU_UTIL"), f"{GPU} compute"),
                        Query(_gpu("DCGM_FI_DEV_MEM_COPY_UTIL"), f"{GPU} memory copy"),
                    ),
                ),
                Panel(
                    "Framebuffer used",
                    units.Mebibytes,
                    "GPU memory in use, against the total (used + free).",
                    (
                        Query(_gpu("DCGM_FI_DEV_FB_USED"), f"{GPU} used"),
                        Query(
                            f"{_gpu('DCGM_FI_DEV_FB_USED')} + {_gpu('DCGM_FI_DEV_FB_FREE')}",
                            f"{GPU} total",
                        ),
                    ),
                ),
                Panel(
                    "Power draw",
                    units.Watt,
                    "Board power (DCGM_FI_DEV_POWER_USAGE).",
                    (Query(_gpu("DCGM_FI_DEV_POWER_USAGE"), GPU),),
                ),
                Panel(
                    "Temperature",
                    units.Celsius,
                    "GPU die and memory temperature.",
                    (
                        Query(_gpu("DCGM_FI_DEV_GPU_TEMP"), f"{GPU} GPU"),
                        Query(_gpu("DCGM_FI_DEV_MEMORY_TEMP"), f"{GPU} memory"),
                    ),
                ),
            ),
        ),
        (
            "Errors",
            (
                Panel(
                    "XID errors",
                    units.Short,
                    "XID errors each GPU reported in the exporter's count window (5 minutes), by XID; "
                    "NVIDIA's catalogue says what each means (monitoring/xid_catalog.py, the GpuXid alerts).",
                    (
                        Query(
                            f'max by ({BY_GPU}, xid) (DCGM_EXP_XID_ERRORS_COUNT{{xid!="",node=~"$node"}})',
                            GPU + " XID " + _label("xid"),
                        ),
                    ),
                ),
                Panel(
                    "ECC: remapped rows",
                    units.Short,
                    "Memory rows remapped after correctable and uncorrectable ECC errors, and whether a "
                    "remap failed (1: the GPU needs service).",
                    (
                        Query(_gpu("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"), f"{GPU} correctable"),
                        Query(_gpu("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"), f"{GPU} uncorrectable"),
                        Query(_gpu("DCGM_FI_DEV_ROW_REMAP_FAILURE"), f"{GPU} remap failure"),
                    ),
                ),
            ),
        ),
    )


def _limiter() -> tuple[Section, ...]:
    io_by = f"{BY_POD}, device, direction"
    io_legend = f"{POD} {_label('device')} {_label('direction')}"
    return (
        (
            "Pods",
            (
                Panel(
                    "Pod IO rate and limit",
                    units.BytesPerSecondSI,
                    "Each pod's read/write rate from io.stat, and the io.max limit the agent wrote.",
                    (
                        Query(f"sum by ({io_by}) (cgroup_limiter_pod_io_bytes_per_second{NODE})", f"{io_legend} rate"),
                        Query(
                            f"sum by ({io_by}) (cgroup_limiter_pod_io_limit_bytes_per_second{NODE})",
                            f"{io_legend} limit",
                        ),
                    ),
                ),
                Panel(
                    "Throttled pods",
                    units.Short,
                    "Pods under an adaptive throttle, per node.",
                    (Query(f"sum by (node) (cgroup_limiter_pod_throttled{NODE})", _label("node")),),
                ),
                Panel(
                    "Throttle transitions",
                    units.OpsPerSecond,
                    "Adaptive throttles applied and released per second.",
                    (
                        Query(
                            _rate("cgroup_limiter_throttle_events_total", NODE, "node, action"),
                            _label("node", "action"),
                        ),
                    ),
                ),
                Panel(
                    "CPU max applied",
                    units.Short,
                    "cpu.max the agent applied, in cores (quota / period).",
                    (Query(f"max by ({BY_POD}) (cgroup_limiter_pod_cpu_max_cores{NODE})", POD),),
                ),
            ),
        ),
        (
            "Agent",
            (
                Panel(
                    "Scan duration P99",
                    units.Seconds,
                    "Time of one scan of every pod cgroup, 99th percentile.",
                    (
                        Query(
                            "histogram_quantile(0.99, "
                            f"{_rate('cgroup_limiter_scan_duration_seconds_bucket', NODE, 'node, le')})",
                            _label("node"),
                        ),
                    ),
                ),
                Panel(
                    "Time since the last scan",
                    units.Seconds,
                    "Seconds since the agent last completed a scan (/healthz fails when it grows).",
                    (
                        Query(
                            f"time() - max by (node) (cgroup_limiter_last_scan_timestamp_seconds{NODE})",
                            _label("node"),
                        ),
                    ),
                ),
                Panel(
                    "Pod cgroups",
                    units.Short,
                    "Pod cgroups seen in the last scan, by state (managed, protected, unidentified).",
                    (Query(f"sum by (node, state) (cgroup_limiter_pod_cgroups{NODE})", _label("node", "state")),),
                ),
                Panel(
                    "Errors and writes",
                    units.OpsPerSecond,
                    "Errors the agent survived, by reason, and writes to cgroup files, by file.",
                    (
                        Query(
                            _rate("cgroup_limiter_errors_total", NODE, "node, reason"),
                            _label("node") + " error " + _label("reason"),
                        ),
                        Query(
                            _rate("cgroup_limiter_writes_total", NODE, "node, file"),
                            _label("node") + " write " + _label("file"),
                        ),
                    ),
                ),
            ),
        ),
    )


GATEWAY = '{model=~"$model"}'


def _gateway_quantile(q: float, metric: str) -> str:
    return f"histogram_quantile({q}, sum by (model, le) (rate({metric}_bucket{GATEWAY}{RATE})))"


def _gateway() -> tuple[Section, ...]:
    model = _label("model")
    return (
        (
            "Traffic and errors",
            (
                Panel(
                    "Requests by code",
                    units.RequestsPerSecond,
                    "Requests per second answered by the gateway, by model and HTTP status code (5m rate).",
                    (Query(f'{GATEWAY_REQUESTS}{{model=~"$model"}}', f"{model} {_label('code')}"),),
                ),
                Panel(
                    "5xx ratio",
                    units.PercentUnit,
                    "Requests answered 502, 503 or 504 over all requests (5m); the availability SLO counts 429 too.",
                    (Query(f'{GATEWAY_5XX_RATIO}{{model=~"$model"}}', model),),
                ),
                Panel(
                    "Error budget left",
                    units.PercentUnit,
                    "Share of the 30-day error budget not yet spent, per SLO: availability (neither 5xx nor 429,"
                    " 99.9 %) and latency (2xx within 0.5 s, 99 %); below 0 it is overspent.",
                    (
                        Query(f'{GATEWAY_AVAILABILITY_BUDGET}{{model=~"$model"}}', f"{model} availability"),
                        Query(f'{GATEWAY_LATENCY_BUDGET}{{model=~"$model"}}', f"{model} latency"),
                    ),
                ),
            ),
        ),
        (
            "Latency",
            (
                Panel(
                    "Latency at the gateway",
                    units.Seconds,
                    "P50 and P99 of the whole request at the gateway, and the P95 the alert reads (5m).",
                    (
                        Query(_gateway_quantile(0.5, "gateway_request_duration_seconds"), f"{model} P50"),
                        Query(f'{GATEWAY_LATENCY_P95}{{model=~"$model"}}', f"{model} P95"),
                        Query(_gateway_quantile(0.99, "gateway_request_duration_seconds"), f"{model} P99"),
                    ),
                ),
                Panel(
                    "Triton call against the whole request",
                    units.Seconds,
                    "Mean time of the gRPC call to Triton and of the whole request; the difference is the gateway's"
                    " own.",
                    (
                        Query(
                            f"sum by (model) (rate(gateway_triton_request_duration_seconds_sum{GATEWAY}{RATE}))"
                            f" / sum by (model) (rate(gateway_triton_request_duration_seconds_count{GATEWAY}{RATE}))",
                            f"{model} Triton call",
                        ),
                        Query(
                            f"sum by (model) (rate(gateway_request_duration_seconds_sum{GATEWAY}{RATE}))"
                            f" / sum by (model) (rate(gateway_request_duration_seconds_count{GATEWAY}{RATE}))",
                            f"{model} whole request",
                        ),
                    ),
                ),
            ),
        ),
        (
            "Saturation",
            (
                Panel(
                    "In flight",
                    units.Short,
                    "Requests being handled by the gateway, by model (all pods).",
                    (Query(f"sum by (model) (gateway_requests_in_flight{GATEWAY})", model),),
                ),
                Panel(
                    "Rejections",
                    units.RequestsPerSecond,
                    "Requests refused, by reason: overloaded (429, the gateway's bound), triton_overloaded (429, the"
                    " model's queue at Triton), model_not_ready (503, that model), triton_not_ready and"
                    " triton_unreachable (503).",
                    (Query(f'{GATEWAY_REJECTIONS}{{model=~"$model"}}', f"{model} {_label('reason')}"),),
                ),
                Panel(
                    "Gateways that find Triton ready",
                    units.Short,
                    "Gateway pods whose readiness probe reaches Triton and finds its server ready, against all.",
                    (
                        Query("sum(gateway_triton_ready)", "ready"),
                        Query("count(gateway_triton_ready)", "gateway pods"),
                    ),
                ),
                Panel(
                    "Gateways that find the model ready",
                    units.Short,
                    "Gateway pods whose probe finds the model loaded and ready at Triton; while it is not, that"
                    " model's requests get 503 and the others are served.",
                    (Query('sum by (model) (gateway_model_ready{model=~"$model"})', model),),
                ),
            ),
        ),
    )


def _variable(name: str, query: str) -> dashboard.QueryVariable:
    return (
        dashboard.QueryVariable(name)
        .label(name)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.NATURAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )


MODEL_VARIABLES = (
    _variable("model", "label_values(nv_inference_request_success, model)"),
    _variable("version", 'label_values(nv_inference_request_success{model=~"$model"}, version)'),
)


def _panel(number: int, panel: Panel) -> timeseries.Panel:
    built = (
        timeseries.Panel()
        .id(number)
        .title(panel.title)
        .description(panel.description)
        .unit(panel.unit)
        .datasource(DATASOURCE)
        .span(12)
        .height(8)
        .legend(
            common.VizLegendOptions()
            .show_legend(True)
            .display_mode(LegendDisplayMode.TABLE)
            .placement(LegendPlacement.BOTTOM)
            .calcs(["mean", "max"])
        )
    )
    for ref, query in zip("ABCDEFGH", panel.queries, strict=False):
        built.with_target(prometheus.Dataquery().ref_id(ref).expr(query.expr).legend_format(query.legend))
    return built


def _board(
    uid: str,
    title: str,
    description: str,
    variables: tuple[dashboard.QueryVariable, ...],
    sections: tuple[Section, ...],
) -> dict[str, Any]:
    board = (
        dashboard.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(TAGS)
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
        .with_variable(dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus"))
    )
    for variable in variables:
        board.with_variable(variable)
    number = 0
    for heading, panels in sections:
        number += 1
        board.with_row(dashboard.Row(heading).id(number).collapsed(False))
        for panel in panels:
            number += 1
            board.with_panel(_panel(number, panel))
    return json.loads(json.dumps(board.build(), cls=JSONEncoder))


def dashboards() -> dict[str, dict]:
    """File stem -> Grafana dashboard JSON model."""
    node_variable = (_variable("node", "label_values(DCGM_FI_DEV_GPU_TEMP, node)"),)
    limiter_node = (_variable("node", "label_values(cgroup_limiter_last_scan_timestamp_seconds, node)"),)
    return {
        "triton": _board(
            "gpu-serving-triton",
            "Triton: golden signals",
            "Traffic, errors and latency of every model version that Triton serves.",
            MODEL_VARIABLES,
            _triton(),
        ),
        "triton-batching": _board(
            "gpu-serving-triton-batching",
            "Triton: queue and batching",
            "Dynamic batching, queue against compute time, pending requests and instance saturation.",
            MODEL_VARIABLES,
            _batching(),
        ),
        "gpu-health": _board(
            "gpu-serving-gpu-health",
            "GPU health (DCGM)",
            "Per-GPU telemetry of the DCGM exporter on every GPU node.",
            node_variable,
            _gpu_health(),
        ),
        "gateway": _board(
            "gpu-serving-gateway",
            "Gateway: edge golden signals",
            "The HTTP gateway in front of Triton (serving/gateway): what clients see.",
            (_variable("model", "label_values(gateway_requests_total, model)"),),
            _gateway(),
        ),
        "cgroup-limiter": _board(
            "gpu-serving-cgroup-limiter",
            "cgroup limiter",
            "The node agent that limits pods' IO and CPU through cgroup v2.",
            limiter_node,
            _limiter(),
        ),
    }


def render(board: dict) -> str:
    return json.dumps(board, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def build(out_dir: Path) -> list[Path]:
    """Write every dashboard as `<stem>.json`; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, board in sorted(dashboards().items()):
        path = out_dir / f"{stem}.json"
        path.write_text(render(board), encoding="utf-8")
        written.append(path)
    return written


def panels(board: dict) -> Iterator[dict]:
    """Every panel that queries (rows only group them)."""
    for panel in board.get("panels", []):
        if panel.get("type") == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


_LABEL_VALUES = re.compile(r"label_values\((?P<expr>.*),\s*\w+\)\s*$", re.DOTALL)


def queries(board: dict) -> Iterator[tuple[str, str]]:
    """(what, PromQL) for every panel target and every query variable of a dashboard."""
    for panel in panels(board):
        for target in panel.get("targets", []):
            yield f"panel {panel.get('title')!r}", target.get("expr", "")
    for variable in board.get("templating", {}).get("list", []):
        selector = _LABEL_VALUES.match(variable.get("query", "")) if variable.get("type") == "query" else None
        if selector:
            yield f"variable {variable['name']!r}", selector.group("expr")


def check() -> list[str]:
    """Stale or missing generated files, and panel queries that read a metric nothing produces."""
    boards = dashboards()
    problems = []
    expected = {f"{stem}.json": render(board) for stem, board in boards.items()}
    present = {path.name: path for path in GENERATED.glob("*.json")}
    for name in sorted(expected.keys() | present.keys()):
        where = (GENERATED / name).relative_to(ROOT)
        if name not in present:
            problems.append(f"{where}: missing; run `python -m monitoring build`")
        elif name not in expected:
            problems.append(f"{where}: no dashboard builds it any more; delete it")
        elif present[name].read_text(encoding="utf-8") != expected[name]:
            problems.append(f"{where}: out of date; run `python -m monitoring build`")
    known = catalog()
    for stem, board in sorted(boards.items()):
        problems += known.problems(str((GENERATED / f"{stem}.json").relative_to(ROOT)), queries(board))
    return problems
