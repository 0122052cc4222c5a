"""Every metric name that the rules, the dashboards and the HPA's adapter query read is produced
by something: an exporter of the stack, a recording rule, or Prometheus itself."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest

from monitoring import dashboards, metric_names, promql
from monitoring.metric_names import catalog
from serving.canary.analysis import resolve_args, substitute

ROOT = Path(__file__).resolve().parents[2]
PULUMI_DIR = ROOT / "pulumi"
if str(PULUMI_DIR) not in sys.path:
    sys.path.insert(0, str(PULUMI_DIR))

from gpu_serving import charts  # noqa: E402
from gpu_serving.config import from_stack_file  # noqa: E402

CATALOG = catalog()
ENVS = sorted(path.name.split(".")[1] for path in PULUMI_DIR.glob("Pulumi.*.yaml"))
RULE_FILE = str(metric_names.RULES.relative_to(metric_names.ROOT))


def test_the_rules_read_only_metrics_that_exist() -> None:
    assert metric_names.RULES.exists(), "monitoring/generated/rules.yml is missing: run `python -m monitoring build`"
    queries = metric_names.rule_queries()
    assert queries
    assert CATALOG.problems(RULE_FILE, queries) == []


def test_the_release_alerts_group_by_labels_the_rollouts_controller_sets() -> None:
    """rollout_info's labels at the pinned Argo Rollouts: its phase is a label, not a series per
    phase (the deprecated rollout_phase's form), and the alerts keep namespace and name."""
    labels = set(metric_names.argo_rollouts()["rollout_info"])
    alerts = [r for r in metric_names.rules() if r.get("alert", "").startswith("Rollout")]
    assert len(alerts) == 3
    for rule in alerts:
        used = set(re.findall(r"\b(\w+)=~?\"", rule["expr"])) | {
            name.strip() for by in re.findall(r"by \(([^)]*)\)", rule["expr"]) for name in by.split(",")
        }
        assert used and used <= labels, (rule["alert"], used - labels)


@pytest.mark.parametrize("stem", sorted(dashboards.dashboards()))
def test_the_dashboards_read_only_metrics_that_exist(stem: str) -> None:
    board = dashboards.dashboards()[stem]
    assert CATALOG.problems(f"{stem}.json", dashboards.queries(board)) == []


@pytest.mark.parametrize("env", ENVS)
def test_the_hpa_adapter_reads_only_metrics_that_exist(env: str) -> None:
    """prometheus-adapter's rules as the release installs them. metricsQuery is filled in as the
    adapter does for one series of seriesQuery: <<.Series>> its name, <<.LabelMatchers>> the
    matchers of the pods asked for, <<.GroupBy>> the label they are grouped by."""
    rules = charts.prometheus_adapter(from_stack_file(env)).values["rules"]["custom"]
    assert rules
    for index, rule in enumerate(rules):
        (series,) = promql.metric_names(rule["seriesQuery"])
        assert re.search(rule["name"]["matches"], series), rule["name"]
        adapter = {"Series": series, "LabelMatchers": 'namespace="triton",pod=~"triton-0|triton-1"', "GroupBy": "pod"}
        query = re.sub(r"<<\.(\w+)>>", lambda match, filled=adapter: filled[match.group(1)], rule["metricsQuery"])
        assert promql.metric_names(query) == {series}
        queries = [(f"rule {index} seriesQuery", rule["seriesQuery"]), (f"rule {index} metricsQuery", query)]
        assert CATALOG.problems(f"prometheus-adapter ({env})", queries) == []


@pytest.mark.parametrize("env", ENVS)
def test_the_canary_analysis_reads_only_metrics_that_exist(env: str) -> None:
    """Every Prometheus query of the rendered AnalysisTemplates, its {{args.*}} filled in as the
    Rollout's analysis step fills them (the pod template hashes given, the rest the templates' own)."""
    queries = []
    for path in sorted((ROOT / "deploy/serving" / env / "manifests").glob("*-analysistemplate-*.yaml")):
        template = next(doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc)
        values = resolve_args([template], {"stable-hash": "6d4cf56db6", "canary-hash": "7f9b8c5d4e"})
        for metric in template["spec"]["metrics"]:
            if "prometheus" in metric["provider"]:
                query = substitute(metric["provider"]["prometheus"]["query"], values, path.name)
                queries.append((f"{template['metadata']['name']} {metric['name']}", query))
    assert len(queries) == 2, "the latency and error templates query Prometheus"
    assert CATALOG.problems(f"deploy/serving/{env}", queries) == []


def test_a_rule_reading_a_metric_no_exporter_produces_is_named(tmp_path: Path) -> None:
    rule_file = tmp_path / "rules.yml"
    rule_file.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "g",
                        "rules": [
                            {"alert": "GpuHot", "expr": "DCGM_FI_DEV_GPU_TEMPERATURE > 85"},
                            {"record": "model:x:rate1m", "expr": "sum by (model) (rate(nv_inference_count[1m]))"},
                        ],
                    }
                ]
            }
        )
    )
    assert CATALOG.problems("rules.yml", metric_names.rule_queries(rule_file)) == [
        "rules.yml: alert 'GpuHot': DCGM_FI_DEV_GPU_TEMPERATURE is produced by no exporter, rule or Prometheus"
    ]


def test_dcgm_names_are_the_deployed_counters_and_include_the_required_ones() -> None:
    required = yaml.safe_load(Path(metric_names.ROOT, "roles/k8s_addons/vars/main.yml").read_text())[
        "k8s_addons_dcgm_exporter_required_fields"
    ]
    assert set(required) <= metric_names.dcgm()


def test_limiter_names_are_what_its_metrics_endpoint_writes() -> None:
    """Every family of the limiter with one series, exposed by prometheus_client as the agent's
    /metrics does: the sample names are exactly the ones limiter() expands from the types."""
    module = metric_names._limiter_module()
    metrics = module.Metrics()
    metrics.expose_rates(lambda: [("ns", "pod", "254:0", "read", 1.0)])
    pod, io = ("ns", "pod"), ("ns", "pod", "254:0", "read")
    metrics.io_limit.labels(*io).set(1)
    metrics.throttled.labels(*io).set(1)
    metrics.throttle_events.labels(*io, "throttle").inc()
    metrics.cpu_weight.labels(*pod).set(100)
    metrics.cpu_max.labels(*pod).set(1)
    metrics.scan_duration.observe(0.01)
    metrics.errors.labels("scan").inc()
    metrics.writes.labels("io.max").inc()
    metrics.pod_cgroups.labels("managed").set(1)
    metrics.last_scan.set(1)
    metrics.io_pressure.labels("protected").set(1)
    metrics.pod_source_errors.labels("watch").inc()
    exposed = metric_names.exposition_names(generate_latest(metrics.registry).decode())
    assert exposed == metric_names.limiter()


def test_triton_names_come_from_the_recorded_scrape() -> None:
    names = metric_names.triton()
    # summary_latencies=true was on, and every model was under load.
    assert {"nv_inference_request_summary_us", "nv_inference_queue_summary_us_count"} <= names
    text = metric_names.TRITON_SCRAPE.read_text()
    models = sorted(config.parent.name for config in (metric_names.ROOT / "model_repository").glob("*/config.pbtxt"))
    assert models
    for model in models:
        assert f'nv_inference_request_success{{model="{model}"' in text
