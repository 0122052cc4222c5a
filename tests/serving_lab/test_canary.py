"""A canary release analysed by the rendered AnalysisTemplates against the real tritonserver and a
real Prometheus, step by step, with the load split by each step's weight.

Two tritonservers stand for the two tracks (stable: text-classifier version 1; canary: per case),
each scraped by this module's Prometheus with the label `rollouts_pod_template_hash` (made-up
hashes, a new one per case as a new Rollout revision has). The AnalysisTemplates and the canary
steps are read from the rendered YAML (deploy/serving/prod/manifests: the AnalysisTemplates and
the Rollout `triton`), so their queries, conditions, limits and step list are the ones Argo CD
syncs.

What the lab changes, and only that: the Prometheus address (loopback), the waits (initialDelay
and interval, `TIMING`, and the `window` arg the templates keep equal to initialDelay), the golden
Job's addresses (args stable-url / canary-url: the lab's gRPC
ports) and how the Job's container runs (its command on this machine, in the repository root,
which has the image's /opt/app layout).

Both tracks' model copies add a batch-1 warmup to the shipped config (the shipped warmup is batch
4 only): without it a fresh process's first batch-1 requests took 5-10 ms and an equal canary at
5% measured 2-8x the stable's P95 on this machine.

Both tracks' model copies also execute in EXECUTE_MS (the lab backend's `lab_execute_delay_ms`),
with one instance per load client so that no request queues. The example model computes in about
a millisecond on this CPU, where the scheduling noise of a busy 2-core machine (a mostly idle
canary process woken for one request in twenty) is itself 10-70% of a request: an equal canary
measured P95 ratios of 1.1 to 1.7 and was aborted now and then. A model that takes a hundred
milliseconds, as large served models do on their GPUs, puts that noise at a few percent, so the
ratio measures the models: the equal canary runs EXECUTE_MS, the slower one 30% more.

The clients keep headroom: RATE x EXECUTE_MS is 8 requests in flight of CLIENTS, so a client's
period (CLIENTS / RATE, 150 ms) stays above even the slower canary's latency plus noise. With
50 ms and 10 clients (period 67 ms) the load left 17 ms: on a loaded machine the stable's latency
crossed the period now and then, every client fell behind and sent back to back, all ten stable
instances stayed busy and requests waited for one. The stable's P95 rose from 54 to 65-103 ms
while the canary's barely moved, and a 30% slower canary measured 0.74-1.17 and was promoted (in
CI beside the VM lab, and here under the other serving-lab modules and two busy loops).

Few instances: the Python backend of Triton 2.51 has crashed the whole server under load
(`boost::interprocess::lock_exception`, as in triton-inference-server/server#8882) with 20 and
24 instances per server (in CI twice in four starts of 20); with 10 or 12 it has not here. A rate that
few instances serve needs a longer window for the canary's 5% to reach min-requests: the lab
runs the templates' waits at 0.5x instead of 0.3x.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
import yaml
from onnx import numpy_helper

from model_repo_check.tritonserver.processes import LOOPBACK, ServerError, ServerProcess, free_port, wait_for
from model_repo_check.tritonserver.server import REPO, TritonProcess
from serving.canary.analysis import AnalysisRun, RunResult, Timing, duration_seconds, prometheus_query
from serving.canary.build_golden import GOLDEN_FILE
from serving.canary.golden import read_golden
from serving.canary.steps import ABORTED, PAUSED, PROMOTED, Decision, drive
from serving.canary.traffic import WeightedLoad

pytestmark = pytest.mark.serving_lab

MODEL = "text-classifier"
SOURCE = REPO / "model_repository" / MODEL
MANIFESTS = REPO / "deploy/serving/prod/manifests"
STABLE_HASH = "5d8f7c9b4a"
# Requests per second over both tracks: 5% of it is 4/s to the canary (120 in a 30 s window,
# above the templates' min-requests 100), from CLIENTS clients, each one request at a time.
RATE = 80
CLIENTS = 12
EXECUTE_MS = 100.0  # each track's execute time; 8 requests in flight of 12 (the module docstring)
WARM_SECONDS = 5
# Triton 2.51 builds its latency summaries with prometheus-cpp's Summary and sets only the
# quantiles (core's src/metric_model_reporter.cc), so each quantile covers the library's default
# max_age of 60 s; a little more, so that the oldest age bucket has rotated out.
SUMMARY_WINDOW_S = 62
# The lab runs the templates' waits at 0.5x: initialDelay 1m -> 30 s (by then 5% of RATE has
# served 120 requests, above the templates' min-requests 100), interval 30 s -> 15 s, the golden
# Job's 2m30s -> 75 s; the `window` arg, which the templates keep equal to initialDelay, with them.
TIMING = Timing(scale=0.5)
WINDOW = "30s"


def _lab_repository(target: Path, model_file: Path | bytes, delay_ms: float = EXECUTE_MS) -> Path:
    """A model repository with text-classifier as shipped (labels, golden set, config) but one
    version, an execute time of `delay_ms` and one instance per load client."""
    folder = target / MODEL
    (folder / "1").mkdir(parents=True)
    model = model_file if isinstance(model_file, bytes) else model_file.read_bytes()
    (folder / "1/model.onnx").write_bytes(model)
    for name in ("labels.txt", GOLDEN_FILE):
        shutil.copy(SOURCE / name, folder / name)
    config = (SOURCE / "config.pbtxt").read_text()
    config = config.replace(
        "version_policy: { specific: { versions: [1, 2] } }", "version_policy: { latest: { num_versions: 1 } }"
    )
    warmup_1 = (
        'name: "zeros_batch_1"\n    batch_size: 1\n    inputs {\n      key: "embedding"\n'
        "      value: { data_type: TYPE_FP32, dims: [32], zero_data: true }\n    }\n  },\n  {\n"
        '    name: "zeros_batch_4"'
    )
    assert 'name: "zeros_batch_4"' in config and "version_policy: { latest" in config, "the shipped config changed"
    config = config.replace('name: "zeros_batch_4"', warmup_1, 1)
    instances = "    kind: KIND_AUTO\n    count: 1\n"
    assert instances in config, "the shipped instance_group changed"
    config = config.replace(instances, f"    kind: KIND_AUTO\n    count: {CLIENTS}\n", 1)
    config += f'\nparameters {{ key: "lab_execute_delay_ms" value: {{ string_value: "{delay_ms:.3f}" }} }}\n'
    (folder / "config.pbtxt").write_text(config)
    return target


def _accuracy(model: bytes, inputs: np.ndarray, labels: list[str]) -> float:
    names = (SOURCE / "labels.txt").read_text().split()
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    predicted = session.run(["probabilities"], {"embedding": inputs.astype(np.float32)})[0].argmax(axis=1)
    return 100.0 * float(np.mean([names[i] == label for i, label in zip(predicted, labels, strict=True)]))


def less_accurate_model() -> tuple[bytes, float, float]:
    """Version 1 with seeded noise on its output layer, the first seed that costs 0.8-1.6 points
    on the golden set (checked here with onnxruntime, then by the golden program through Triton)."""
    golden = read_golden(SOURCE / GOLDEN_FILE)
    stable = (SOURCE / "1/model.onnx").read_bytes()
    baseline = _accuracy(stable, golden.inputs, golden.labels)
    for seed in range(200):
        model = onnx.load_from_string(stable)
        for tensor in model.graph.initializer:
            if tensor.name == "w2":
                weights = numpy_helper.to_array(tensor)
                noise = np.random.default_rng(seed).normal(0.0, 0.02, weights.shape)
                tensor.CopyFrom(numpy_helper.from_array((weights + noise).astype(np.float32), "w2"))
        candidate = model.SerializeToString(deterministic=True)
        accuracy = _accuracy(candidate, golden.inputs, golden.labels)
        if 0.8 <= baseline - accuracy <= 1.6:
            return candidate, baseline, accuracy
    raise AssertionError("no seed in 0..199 perturbs version 1 by 0.8-1.6 points")


def rendered(kind: str) -> list[dict[str, Any]]:
    """Every object of `kind` in the prod render; a clear failure when the render has none."""
    documents = [
        doc
        for path in sorted(MANIFESTS.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") == kind
    ]
    assert documents, f"no {kind} in {MANIFESTS}: run `make render ENV=prod`"
    return documents


def load_templates() -> dict[str, dict[str, Any]]:
    return {template["metadata"]["name"]: template for template in rendered("AnalysisTemplate")}


def load_steps() -> list[dict[str, Any]]:
    (rollout,) = rendered("Rollout")
    return rollout["spec"]["strategy"]["canary"]["steps"]


class Scrapes(ServerProcess):
    """This module's Prometheus: scrapes each Triton every second, labelled with its track's hash."""

    name = "prometheus"

    def __init__(self, base: Path) -> None:
        super().__init__(base / "prometheus.log")
        self.base = base
        self.targets = base / "targets.json"
        self.targets.write_text("[]")
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {"job_name": "triton", "file_sd_configs": [{"files": [str(self.targets)], "refresh_interval": "1s"}]}
            ],
        }
        (base / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.url = f"http://{LOOPBACK}:{free_port()}"

    def start(self, timeout: float = 60) -> None:
        argv = [
            "prometheus",
            f"--config.file={self.base / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.base / 'data'}",
            f"--web.listen-address={self.url.removeprefix('http://')}",
        ]
        self._launch(argv, os.environ, f"{self.url}/-/ready", timeout)

    def label(self, tracks: Mapping[str, TritonProcess]) -> None:
        """Scrape exactly these Tritons, `{hash: process}`, and wait until each target is up."""
        groups = [
            {
                "targets": [t.metrics_url.removeprefix("http://").removesuffix("/metrics")],
                "labels": {"rollouts_pod_template_hash": h},
            }
            for h, t in tracks.items()
        ]
        partial = self.targets.with_suffix(".partial")
        partial.write_text(json.dumps(groups))
        partial.replace(self.targets)

        def up() -> bool:
            result = prometheus_query(
                self.url, f'count(up{{job="triton",rollouts_pod_template_hash=~"{"|".join(tracks)}"}} == 1)'
            )
            return result == [float(len(tracks))]

        wait_for(up, 30, f"Prometheus to scrape {sorted(tracks)}")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("canary")
    stable = TritonProcess(_lab_repository(base / "stable-repository", SOURCE / "1/model.onnx"), base / "stable")
    scrapes = Scrapes(base)
    try:
        stable.start()
        scrapes.start()
        yield {"base": base, "stable": stable, "scrapes": scrapes, "templates": load_templates()}
    finally:
        scrapes.stop()
        stable.stop()


def _run_job(container: Mapping[str, Any]) -> tuple[int, str]:
    """The golden Job's container, run here: the image's Python is this venv's, its WORKDIR the repo."""
    command = [sys.executable if part == "/opt/venv/bin/python" else part for part in container["command"]]
    result = subprocess.run(
        [*command, *container["args"]], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    return result.returncode, result.stdout + result.stderr


def _warm(triton: TritonProcess) -> None:
    """WARM_SECONDS of the lab's load on a fresh canary before its steps start, then a wait until
    Triton's latency summary has forgotten them. Each instance's first requests are slow
    (onnxruntime's first runs); with CLIENTS instances and one request in twenty they were the
    canary's P95 (an equal canary measured 1.4x). On a cluster the canary's minute of initialDelay
    dilutes them; the lab compresses that minute to 30 s, so it warms the canary instead.

    The P95 that the templates compare is Triton's own summary quantile over the last
    SUMMARY_WINDOW_S, which the lab cannot compress: without the wait, the warm-up's requests, all
    of the canary's traffic at full rate, stayed in the canary's quantile for the first measurements
    and outweighed the step's 5 % (an equally fast canary measured 1.20 and 1.21 twice in a row and
    was aborted). Scraping starts afterwards: these requests count in no window."""
    with WeightedLoad(triton.grpc_url, triton.grpc_url, MODEL, "embedding", 32, clients=CLIENTS, rate=RATE):
        time.sleep(WARM_SECONDS)
    time.sleep(SUMMARY_WINDOW_S)


def _alive(tracks: Mapping[str, TritonProcess], when: str) -> None:
    """A tritonserver that died (the Python backend has crashed under load: boost lock_exception)
    fails the case with its log, instead of as failed requests and a target Prometheus never sees."""
    for track, server in tracks.items():
        if not server.running:
            raise ServerError(f"the {track} tritonserver is not running {when}", server.log)


@contextmanager
def scrape_gap(
    scrapes: Scrapes, tracks: Mapping[str, TritonProcess], canary_hash: str, gap: tuple[float, float]
) -> Iterator[None]:
    """From gap[0] to gap[1] seconds on, Prometheus does not scrape the canary (a scrape outage,
    a relabelling slip): its series go stale and a measurement in between has no data."""
    stop = threading.Event()

    def outage() -> None:
        if not stop.wait(gap[0]):
            scrapes.label({h: t for h, t in tracks.items() if h != canary_hash})
            if not stop.wait(gap[1] - gap[0]):
                scrapes.label(tracks)

    thread = threading.Thread(target=outage, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=60)


def release(
    lab: dict[str, Any],
    name: str,
    repository: Path,
    reaches_canary: bool = True,
    gap: tuple[float, float] | None = None,
) -> Decision:
    """Start the canary, label both tracks, drive the steps with the weighted load; print the timeline.
    `gap`: seconds after the first step from which to which the canary is not scraped."""
    canary_hash = hashlib.sha256(name.encode()).hexdigest()[:10]
    stable: TritonProcess = lab["stable"]
    _alive({"stable": stable}, f"before the release {name!r}")
    templates = lab["templates"]
    with TritonProcess(repository, lab["base"] / f"canary-{name}") as canary:
        if reaches_canary:
            _warm(canary)
        tracks = {STABLE_HASH: stable, canary_hash: canary}
        lab["scrapes"].label(tracks)

        def analyse(chosen: list[Mapping[str, Any]], args: Mapping[str, str]) -> RunResult:
            lab_args = {"stable-url": stable.grpc_url, "canary-url": canary.grpc_url, "window": WINDOW}
            run = AnalysisRun(chosen, {**args, **lab_args}, lab["scrapes"].url, _run_job, TIMING)
            return run.run()

        load = WeightedLoad(
            stable.grpc_url,
            canary.grpc_url,
            MODEL,
            "embedding",
            32,
            clients=CLIENTS,
            rate=RATE,
            reaches_canary=reaches_canary,
        )
        print(f"\n=== {name}: stable {STABLE_HASH}, canary {canary_hash} ===")
        outage = scrape_gap(lab["scrapes"], tracks, canary_hash, gap) if gap else nullcontext()
        with load, outage:
            decision = drive(
                load_steps(),
                templates,
                {"Stable": STABLE_HASH, "Latest": canary_hash},
                load.set_weight,
                analyse,
            )
        print(
            f"=== {name}: {decision.outcome} at {decision.weight}%,"
            f" requests {dict(load.sent)}, failed {dict(load.failed)}"
        )
        _alive({"stable": stable, "canary": canary}, f"during the release {name!r}")
        return decision


def _metric_values(decision: Decision, metric: str) -> list[str]:
    return [m.value for run in decision.runs for m in run.timeline if m.metric == metric]


def test_equal_canary_is_promoted_to_100(lab: dict[str, Any]) -> None:
    decision = release(lab, "equal", _lab_repository(lab["base"] / "equal", SOURCE / "1/model.onnx"))
    assert decision.outcome == PROMOTED and decision.weight == 100, decision.timeline
    assert [run.phase for run in decision.runs] == ["Successful"] * 2, decision.timeline


def test_30_percent_slower_canary_is_aborted_at_5(lab: dict[str, Any]) -> None:
    delay_ms = 1.3 * EXECUTE_MS
    print(f"\ncanary execute time {delay_ms:.1f} ms against the stable's {EXECUTE_MS:.1f} ms")
    repository = _lab_repository(lab["base"] / "slow", SOURCE / "1/model.onnx", delay_ms)
    decision = release(lab, "slower", repository)
    assert decision.outcome == ABORTED and decision.weight == 0, decision.timeline
    assert len(decision.runs) == 1, f"aborted at the analysis at 5%: {decision.timeline}"
    latency = decision.runs[0].metrics[[m.name for m in decision.runs[0].metrics].index("p95-latency-ratio")]
    assert latency.phase == "Failed", decision.timeline


def test_one_empty_measurement_of_three_is_never_promoted(lab: dict[str, Any]) -> None:
    """The canary is not scraped around the 5% step's second measurement, then scraped again: no
    data once, between two good measurements, pauses the release (with a tolerance of one empty
    measurement, [Successful, no data, Successful] was promoted)."""
    (metric,) = lab["templates"]["triton-canary-latency"]["spec"]["metrics"]
    first = TIMING.scale * duration_seconds(metric["initialDelay"], "initialDelay")
    second = first + TIMING.scale * duration_seconds(metric["interval"], "interval")
    repository = _lab_repository(lab["base"] / "gap", SOURCE / "1/model.onnx")
    decision = release(lab, "gap", repository, gap=(first + 2, second + 5))
    assert decision.outcome == PAUSED and decision.weight == 5, decision.timeline
    assert [run.phase for run in decision.runs] == ["Inconclusive"], decision.timeline
    latency = _metric_values(decision, "p95-latency-ratio")
    assert len(latency) == 2 and latency[0] != "[]" and latency[1] == "[]", decision.timeline


def test_one_point_less_accurate_canary_is_aborted(lab: dict[str, Any]) -> None:
    model, stable_accuracy, canary_accuracy = less_accurate_model()
    print(
        f"\ncanary: version 1 perturbed, golden accuracy {canary_accuracy:.1f}%"
        f" against {stable_accuracy:.1f}% (onnxruntime)"
    )
    decision = release(lab, "less-accurate", _lab_repository(lab["base"] / "less-accurate", model))
    assert decision.outcome == ABORTED and decision.weight == 0, decision.timeline
    golden = [m for run in decision.runs for m in run.timeline if m.metric == "golden-accuracy"]
    assert golden and golden[0].phase == "Failed", decision.timeline
    assert len(decision.runs) == 1, f"aborted at the analysis at 5%: {decision.timeline}"
    report = json.loads(golden[0].message.splitlines()[0])
    assert report["canary_accuracy"] == pytest.approx(canary_accuracy) and report["verdict"] == "fail", report


def test_canary_without_traffic_is_inconclusive_and_never_promoted(lab: dict[str, Any]) -> None:
    repository = _lab_repository(lab["base"] / "no-traffic", SOURCE / "1/model.onnx")
    decision = release(lab, "no-traffic", repository, reaches_canary=False)
    assert decision.outcome == PAUSED and decision.weight < 100, decision.timeline
    assert decision.runs[-1].phase == "Inconclusive", decision.timeline
    assert all(value == "[]" for value in _metric_values(decision, "p95-latency-ratio")), decision.timeline
