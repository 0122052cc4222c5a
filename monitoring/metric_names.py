"""Which metric names exist, and which queries name one that does not.

A name exists when something produces it:
- Triton: a real `/metrics` scrape of the lab's tritonserver under load, with summary latencies
  on (TRITON_SCRAPE; `python -m monitoring.triton_scrape` records it again, and a serving_lab
  test proves that a live scrape still has the same names);
- the DCGM exporter: the counters.csv that the rendered add-ons deploy (deploy/addons/<env>/),
  in every environment;
- the cgroup limiter: the families its code registers (limiter/cgroup_limiter/metrics.py), as
  prometheus_client exposes them;
- the drift agent: the families of serving/drift/metrics.py, likewise;
- the gateway: the families of serving/gateway/metrics.py, likewise;
- the recording rules of monitoring/generated/rules.yml;
- Prometheus itself: `up`, `ALERTS` and the other series it writes;
- kube-state-metrics, which kube-prometheus-stack deploys: nothing here runs it, so the names
  the rules use are listed by hand from its documentation (docs/metrics/workload/pod-metrics.md);
- the Argo Rollouts controller: nothing here runs it either (it needs an API server); its
  families at the pinned version, read from its source (ARGO_ROLLOUTS, a fixture naming the tag).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from monitoring.promql import PromQLError, metric_names
from serving.drift.metrics import DriftMetrics
from serving.gateway.metrics import Metrics as GatewayMetrics

ROOT = Path(__file__).resolve().parents[1]
TRITON_SCRAPE = ROOT / "tests/monitoring/fixtures/triton-2.51-metrics.txt"
ADDONS = ROOT / "deploy/addons"
LIMITER_METRICS = ROOT / "limiter/cgroup_limiter/metrics.py"
RULES = ROOT / "monitoring/generated/rules.yml"
ARGO_ROLLOUTS = ROOT / "tests/monitoring/fixtures/argo-rollouts-v1.9.0-metrics.txt"

# Series that Prometheus writes itself: one set per scrape target, and one per firing alert.
PROMETHEUS = frozenset(
    {
        "up",
        "scrape_duration_seconds",
        "scrape_samples_scraped",
        "scrape_samples_post_metric_relabeling",
        "scrape_series_added",
        "ALERTS",
        "ALERTS_FOR_STATE",
    }
)
KUBE_STATE_METRICS = frozenset({"kube_pod_container_status_ready"})
# The samples of one family, by type, as prometheus_client writes them (text format 0.0.4).
_CLIENT_SAMPLES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
}
_SAMPLE = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)(?:\{|\s)")


def exposition_names(text: str) -> set[str]:
    """The sample names of a Prometheus text exposition (a summary's quantiles, _sum and _count)."""
    return {sample.group(1) for line in text.splitlines() if (sample := _SAMPLE.match(line))}


def triton(scrape: Path = TRITON_SCRAPE) -> set[str]:
    return exposition_names(scrape.read_text(encoding="utf-8"))


def dcgm(addons: Path = ADDONS) -> set[str]:
    """The DCGM fields that the dcgm-exporter-counters ConfigMap configures in every rendered
    environment (dcgm-exporter names each metric after its field)."""
    per_env: list[set[str]] = []
    for manifest in sorted(addons.glob("*/20-dcgm-exporter.yaml")):
        for document in yaml.safe_load_all(manifest.read_text(encoding="utf-8")):
            if document and document["kind"] == "ConfigMap" and "counters.csv" in document.get("data", {}):
                rows = document["data"]["counters.csv"].splitlines()
                fields = [[cell.strip() for cell in row.split(",")] for row in rows if row.strip() and row[0] != "#"]
                # A `label` row adds a label to every metric (the driver version), not a metric.
                per_env.append({field[0] for field in fields if len(field) < 2 or field[1] != "label"})
    if not per_env:
        raise FileNotFoundError(f"no dcgm-exporter counters.csv under {addons}: run `make render-addons`")
    return set.intersection(*per_env)


# The samples of one Go client family, by type: no _created, and a counter's name is as declared.
_GO_SAMPLES = {"counter": ("",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}


def argo_rollouts(families: Path = ARGO_ROLLOUTS) -> dict[str, list[str]]:
    """Every sample name of the Argo Rollouts controller, with its labels (the fixture's
    `name type labels` lines)."""
    samples = {}
    for line in families.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, kind, labels = line.split()
            for suffix in _GO_SAMPLES[kind]:
                samples[name + suffix] = labels.split(",") + (["le"] if suffix == "_bucket" else [])
    return samples


def _limiter_module() -> ModuleType:
    """limiter/cgroup_limiter/metrics.py on its own: it imports nothing else of the agent."""
    spec = importlib.util.spec_from_file_location("cgroup_limiter_metrics", LIMITER_METRICS)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {LIMITER_METRICS}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def limiter() -> set[str]:
    """Every sample name the limiter's /metrics can carry: the families of its Metrics (with
    the IO rates that the agent registers at start), expanded as prometheus_client writes them."""
    metrics = _limiter_module().Metrics()
    metrics.expose_rates(list)
    return {family.name + suffix for family in metrics.registry.collect() for suffix in _CLIENT_SAMPLES[family.type]}


def drift_agent() -> set[str]:
    """Every sample name the drift agent's /metrics can carry (serving.drift.metrics)."""
    registry = DriftMetrics().registry
    return {family.name + suffix for family in registry.collect() for suffix in _CLIENT_SAMPLES[family.type]}


def gateway() -> set[str]:
    """Every sample name the gateway's /metrics can carry (serving.gateway.metrics)."""
    registry = GatewayMetrics().registry
    return {family.name + suffix for family in registry.collect() for suffix in _CLIENT_SAMPLES[family.type]}


def rules(path: Path = RULES) -> list[dict[str, Any]]:
    """Every rule of a Prometheus rule file (none while the file does not exist)."""
    if not path.exists():
        return []
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return [rule for group in document.get("groups", []) for rule in group.get("rules", [])]


def rule_queries(path: Path = RULES) -> list[tuple[str, str]]:
    """(what, PromQL) of every rule of a rule file, `what` naming the record or alert."""
    return [
        (f"record {rule['record']!r}" if "record" in rule else f"alert {rule['alert']!r}", rule["expr"])
        for rule in rules(path)
    ]


@dataclass(frozen=True)
class Catalog:
    sources: dict[str, str]  # metric name -> what produces it

    def problems(self, file: str, queries: Iterable[tuple[str, str]]) -> list[str]:
        """One line per query that cannot be read or names a metric nothing produces; queries are
        (what, PromQL) pairs, `what` naming the panel or rule."""
        found = []
        for what, expr in queries:
            try:
                missing = sorted(metric_names(expr) - self.sources.keys())
            except PromQLError as exc:
                found.append(f"{file}: {what}: {exc}")
                continue
            found += [f"{file}: {what}: {name} is produced by no exporter, rule or Prometheus" for name in missing]
        return found


def catalog() -> Catalog:
    sources = dict.fromkeys(PROMETHEUS, "Prometheus")
    sources |= dict.fromkeys(KUBE_STATE_METRICS, "kube-state-metrics")
    sources |= dict.fromkeys(triton(), f"Triton ({TRITON_SCRAPE.name})")
    sources |= dict.fromkeys(dcgm(), "DCGM exporter (counters.csv)")
    sources |= dict.fromkeys(limiter(), "cgroup limiter")
    sources |= dict.fromkeys(drift_agent(), "drift agent")
    sources |= dict.fromkeys(gateway(), "gateway")
    sources |= dict.fromkeys(argo_rollouts(), f"Argo Rollouts ({ARGO_ROLLOUTS.name})")
    sources |= {rule["record"]: f"recording rule ({RULES.name})" for rule in rules() if "record" in rule}
    return Catalog(sources)
