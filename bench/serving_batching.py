"""make bench-serving: the text-classifier's dynamic batching, measured on a real tritonserver.

The model as shipped (model_repository/text-classifier) is served beside the same model with
its `dynamic_batching` block removed (text-classifier-unbatched, built in a temporary copy of
the repository) by one tritonserver on this machine's CPU (lab_fleet.triton, `.venv-triton`).
perf_analyzer drives each over gRPC with batch-1 requests at concurrency 1, 4, 16 and 32, P95
latency as its stability criterion. The variants are interleaved, concurrency by concurrency
and round by round (the order flips every round), so a busy moment of the machine does not
land on one variant only. Printed: the medians over the rounds, with their spread, as Markdown
tables: throughput and P95 with the ratios to the unbatched model, and where the server's time
goes (Triton's per-model statistics over each run: the batch size the scheduler formed, queue
time per request, compute input/infer/output per execution).
Target: at concurrency 16, at least 2.5x the unbatched throughput with a P95 no worse.

`--config NAME=PATH` adds a candidate config.pbtxt for the same model files (tuning runs).
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import statistics
import sys
import tempfile
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lab_fleet.triton import TritonProcess, perf_analyzer  # noqa: E402

MODEL = "text-classifier"
SHIPPED, UNBATCHED = "shipped", "unbatched"
CONCURRENCY = (1, 4, 16, 32)
TARGET_CONCURRENCY = 16
TARGET_RATIO = 2.5
PHASES = ("compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True)
class Sample:
    """One perf_analyzer run of one variant at one concurrency."""

    throughput: float  # inferences per second, perf_analyzer's stable windows
    p95_ms: float  # client-side P95 latency, same windows
    batch: float  # requests per model execution, from Triton's statistics over the whole run
    queue_us: float  # scheduler queue time per request
    phase_us: dict[str, float]  # compute input/infer/output per model execution


def load_config(path: Path) -> model_config_pb2.ModelConfig:
    config = model_config_pb2.ModelConfig()
    text_format.Parse(path.read_text(encoding="utf-8"), config)
    return config


def build_repository(root: Path, configs: dict[str, model_config_pb2.ModelConfig]) -> dict[str, str]:
    """One model folder per variant (the shipped files under another name); returns variant -> model name."""
    served = {}
    for variant, config in configs.items():
        name = MODEL if variant == SHIPPED else f"{MODEL}-{variant}"
        shutil.copytree(REPO / "model_repository" / MODEL, root / name, ignore=shutil.ignore_patterns("config.pbtxt"))
        config.name = name
        (root / name / "config.pbtxt").write_text(text_format.MessageToString(config), encoding="utf-8")
        served[variant] = name
    return served


def model_stats(http_url: str, model: str) -> Counter[str]:
    """Triton's cumulative statistics for every loaded version of `model`, summed."""
    with urllib.request.urlopen(f"{http_url}/v2/models/{model}/stats", timeout=10) as response:
        versions = json.load(response)["model_stats"]
    totals: Counter[str] = Counter()
    for version in versions:
        totals["inferences"] += int(version["inference_count"])
        totals["executions"] += int(version["execution_count"])
        totals["requests"] += int(version["inference_stats"]["success"]["count"])
        totals["queue_ns"] += int(version["inference_stats"]["queue"]["ns"])
        for batch in version["batch_stats"]:
            for phase in PHASES:
                totals[f"{phase}_ns"] += int(batch[phase]["ns"])
    return totals


def measure(triton: TritonProcess, model: str, concurrency: int, args: argparse.Namespace, report: Path) -> Sample:
    before = model_stats(triton.http_url, model)
    run = perf_analyzer(
        "-m", model, "-u", triton.grpc_url, "-i", "grpc",
        f"--concurrency-range={concurrency}",
        f"--measurement-interval={args.interval_ms}",
        f"--stability-percentage={args.stability}",
        f"--max-trials={args.max_trials}",
        "--percentile=95", "-f", str(report), "--verbose-csv",
    )  # fmt: skip
    if run.returncode != 0:
        raise SystemExit(f"perf_analyzer failed on {model} at concurrency {concurrency}:\n{run.stdout[-3000:]}")
    delta = model_stats(triton.http_url, model)
    delta.subtract(before)
    with report.open(newline="") as handle:
        row = next(csv.DictReader(handle))
    executions = max(delta["executions"], 1)
    return Sample(
        throughput=float(row["Inferences/Second"]),
        p95_ms=float(row["p95 latency"]) / 1000,
        batch=delta["inferences"] / executions,
        queue_us=delta["queue_ns"] / max(delta["requests"], 1) / 1000,
        phase_us={phase: delta[f"{phase}_ns"] / executions / 1000 for phase in PHASES},
    )


def spread(values: Sequence[float], fmt: str) -> str:
    """Median, and the range when there is more than one value."""
    median = format(statistics.median(values), fmt)
    return median if len(values) == 1 else f"{median} ({format(min(values), fmt)}–{format(max(values), fmt)})"


def median_of(samples: list[Sample], value: Callable[[Sample], float]) -> float:
    return statistics.median(value(sample) for sample in samples)


def print_tables(results: dict[tuple[str, int], list[Sample]], variants: list[str], concurrency: Sequence[int]) -> None:
    print("| concurrency | variant | infer/s | P95 ms | throughput ÷ unbatched | P95 ÷ unbatched |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for level in concurrency:
        base = results[UNBATCHED, level]
        for variant in variants:
            samples = results[variant, level]
            throughput = spread([s.throughput for s in samples], ",.0f")
            p95 = spread([s.p95_ms for s in samples], ".2f")
            if variant == UNBATCHED:
                ratios = "", ""
            else:
                ratios = tuple(
                    f"{median_of(samples, value) / median_of(base, value):.2f}"
                    for value in (lambda s: s.throughput, lambda s: s.p95_ms)
                )
            print(f"| {level} | {variant} | {throughput} | {p95} | {ratios[0]} | {ratios[1]} |")
    print()
    print("Server side, medians (queue per request; compute per model execution, in µs):")
    print()
    print("| concurrency | variant | batch | queue | compute input | compute infer | compute output | infer/request |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for level in concurrency:
        for variant in variants:
            samples = results[variant, level]
            batch = median_of(samples, lambda s: s.batch)
            phases = [median_of(samples, lambda s, p=phase: s.phase_us[p]) for phase in PHASES]
            per_request = median_of(samples, lambda s: s.phase_us["compute_infer"] / s.batch)
            cells = " | ".join(f"{value:,.0f}" for value in (median_of(samples, lambda s: s.queue_us), *phases))
            print(f"| {level} | {variant} | {batch:.1f} | {cells} | {per_request:,.0f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--interval-ms", type=int, default=4000, help="perf_analyzer measurement window (4000)")
    parser.add_argument("--stability", type=int, default=50, help="perf_analyzer --stability-percentage (50)")
    parser.add_argument("--max-trials", type=int, default=10, help="perf_analyzer --max-trials (10)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(CONCURRENCY), help="levels (1 4 16 32)")
    parser.add_argument(
        "--config", action="append", default=[], metavar="NAME=PATH", help="also measure this config.pbtxt"
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")

    shipped = load_config(REPO / "model_repository" / MODEL / "config.pbtxt")
    unbatched = load_config(REPO / "model_repository" / MODEL / "config.pbtxt")
    unbatched.ClearField("dynamic_batching")
    configs = {SHIPPED: shipped, UNBATCHED: unbatched}
    for item in args.config:
        name, _, path = item.partition("=")
        if not path or name in configs:
            parser.error(f"--config wants a new NAME=PATH, got {item!r}")
        configs[name] = load_config(Path(path))

    variants = list(configs)
    results: dict[tuple[str, int], list[Sample]] = {(v, c): [] for v in variants for c in args.concurrency}
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
        root = Path(tmp)
        served = build_repository(root / "models", configs)
        with TritonProcess(root / "models", root / "run") as triton:
            for round_index in range(args.rounds):
                order = variants if round_index % 2 == 0 else variants[::-1]
                for level in args.concurrency:
                    for variant in order:
                        report = root / f"{variant}-c{level}-r{round_index}.csv"
                        results[variant, level].append(measure(triton, served[variant], level, args, report))

    print(f"text-classifier, perf_analyzer over gRPC, batch-1 requests, median (min–max) of {args.rounds} round(s):")
    print()
    print_tables(results, variants, args.concurrency)
    if TARGET_CONCURRENCY in args.concurrency:
        print()
        base = results[UNBATCHED, TARGET_CONCURRENCY]
        for variant in variants:
            if variant == UNBATCHED:
                continue
            samples = results[variant, TARGET_CONCURRENCY]
            ratio = median_of(samples, lambda s: s.throughput) / median_of(base, lambda s: s.throughput)
            p95_ok = median_of(samples, lambda s: s.p95_ms) <= median_of(base, lambda s: s.p95_ms)
            verdict = "met" if ratio >= TARGET_RATIO and p95_ok else "NOT met"
            print(
                f"{variant} at concurrency {TARGET_CONCURRENCY}: {ratio:.2f}x unbatched, "
                f"P95 {'no worse' if p95_ok else 'worse'} (target >= {TARGET_RATIO}x, P95 no worse: {verdict})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
