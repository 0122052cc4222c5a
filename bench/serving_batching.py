"""make bench-serving: the text-classifier's dynamic batching, measured on a real tritonserver.

The model as shipped (model_repository/text-classifier) is served beside the same model with
its `dynamic_batching` block removed (text-classifier-unbatched, built in a temporary copy of
the repository) by one tritonserver on this machine's CPU (model_repo_check.tritonserver, `.venv-triton`).
perf_analyzer drives each over gRPC with batch-1 requests at concurrency 1, 4, 16 and 32, P95
latency as its stability criterion. The variants are interleaved, concurrency by concurrency
and round by round (the order flips every round), so a busy moment of the machine does not
land on one variant only. Printed: the medians over the rounds, with their spread, as Markdown
tables: throughput and P95 with the ratios to the unbatched model, and where the server's time
goes (Triton's per-model statistics over each run: the batch size the scheduler formed, queue
time per request, compute input/infer/output per execution; and the CPU time per inference of
perf_analyzer, tritonserver and the Python backend stubs, since client and server share the cores).
A run that finds no stable measurement is left out and counted.
Target: at concurrency 16, at least 2.5x the unbatched throughput with a P95 no worse.

`--config NAME=PATH` adds a candidate config.pbtxt for the same model files (tuning runs).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import resource
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

from model_repo_check.tritonserver.processes import command_of, group_members  # noqa: E402
from model_repo_check.tritonserver.server import TritonProcess, perf_analyzer  # noqa: E402

MODEL = "text-classifier"
SHIPPED, UNBATCHED = "shipped", "unbatched"
CONCURRENCY = (1, 4, 16, 32)
TARGET_CONCURRENCY = 16
TARGET_RATIO = 2.5
PHASES = ("compute_input", "compute_infer", "compute_output")
UNSTABLE = "Failed to obtain stable measurement"
PROCESSES = ("perf_analyzer", "tritonserver", "stubs")
STUB = "triton_python_backend_stub"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Sample:
    """One perf_analyzer run of one variant at one concurrency."""

    throughput: float  # inferences per second, perf_analyzer's stable windows
    p95_ms: float  # client-side P95 latency, same windows
    batch: float  # requests per model execution, from Triton's statistics over the whole run
    queue_us: float  # scheduler queue time per request
    phase_us: dict[str, float]  # compute input/infer/output per model execution
    cpu_us: dict[str, float]  # CPU time per inference of perf_analyzer, tritonserver and the backend stubs


Results = dict[tuple[str, int], list[Sample]]


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


def cpu_seconds(triton: TritonProcess) -> Counter[str]:
    """CPU seconds used so far: perf_analyzer runs (reaped children of this process), tritonserver,
    and its Python backend stubs (live processes of its process group, read from /proc)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    totals: Counter[str] = Counter({PROCESSES[0]: usage.ru_utime + usage.ru_stime})
    for pid in group_members(triton.pid or 0):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        process = PROCESSES[2] if any(STUB in part for part in command_of(pid)) else PROCESSES[1]
        totals[process] += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime
    return totals


def measure(
    triton: TritonProcess, model: str, concurrency: int, args: argparse.Namespace, report: Path
) -> Sample | None:
    """One perf_analyzer run; None when it found no stable measurement within --max-trials windows."""
    before = model_stats(triton.http_url, model)
    cpu_before = cpu_seconds(triton)
    run = perf_analyzer(
        "-m", model, "-u", triton.grpc_url, "-i", "grpc",
        f"--concurrency-range={concurrency}",
        f"--measurement-interval={args.interval_ms}",
        f"--stability-percentage={args.stability}",
        f"--max-trials={args.max_trials}",
        "--percentile=95", "-f", str(report), "--verbose-csv",
    )  # fmt: skip
    if run.returncode != 0 and UNSTABLE in run.stderr:
        return None
    if run.returncode != 0:
        raise SystemExit(f"perf_analyzer failed on {model} at concurrency {concurrency}:\n{run.stdout}{run.stderr}")
    cpu = cpu_seconds(triton)
    cpu.subtract(cpu_before)
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
        cpu_us={process: cpu[process] / max(delta["inferences"], 1) * 1e6 for process in PROCESSES},
    )


def spread(values: Sequence[float], fmt: str) -> str:
    """Median, and the range when there is more than one value."""
    if not values:
        return "unstable"
    median = format(statistics.median(values), fmt)
    return median if len(values) == 1 else f"{median} ({format(min(values), fmt)}–{format(max(values), fmt)})"


def number(value: float, fmt: str) -> str:
    return "–" if math.isnan(value) else format(value, fmt)


def median_of(samples: list[Sample], value: Callable[[Sample], float]) -> float:
    return statistics.median(value(sample) for sample in samples) if samples else math.nan


def ratios(samples: list[Sample], base: list[Sample]) -> tuple[float, float]:
    """Median throughput and median P95 of `samples` over those of `base` (NaN without samples)."""
    return (
        median_of(samples, lambda s: s.throughput) / median_of(base, lambda s: s.throughput),
        median_of(samples, lambda s: s.p95_ms) / median_of(base, lambda s: s.p95_ms),
    )


def print_tables(results: Results, variants: list[str], concurrency: Sequence[int]) -> None:
    print("| concurrency | variant | infer/s | P95 ms | throughput ÷ unbatched | P95 ÷ unbatched |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for level in concurrency:
        for variant in variants:
            samples = results[variant, level]
            cells = [spread([s.throughput for s in samples], ",.0f"), spread([s.p95_ms for s in samples], ".2f")]
            if variant != UNBATCHED:
                cells += [number(ratio, ".2f") for ratio in ratios(samples, results[UNBATCHED, level])]
            print(f"| {level} | {variant} | {' | '.join(cells)} |")
    print()
    print("Where the time goes, medians. Triton's statistics: requests per execution, queue per request,")
    print("compute per execution (µs). CPU per inference (µs): perf_analyzer, tritonserver, Python backend stubs.")
    print()
    print("| concurrency | variant | batch | queue | compute input | infer | output | CPU client | server | stubs |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for level in concurrency:
        for variant in variants:
            samples = results[variant, level]
            values = [
                median_of(samples, lambda s: s.queue_us),
                *(median_of(samples, lambda s, p=phase: s.phase_us[p]) for phase in PHASES),
                *(median_of(samples, lambda s, p=process: s.cpu_us[p]) for process in PROCESSES),
            ]
            cells = " | ".join(number(value, ",.0f") for value in values)
            print(f"| {level} | {variant} | {number(median_of(samples, lambda s: s.batch), '.1f')} | {cells} |")


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
    results: Results = {(v, c): [] for v in variants for c in args.concurrency}
    unstable: Counter[str] = Counter()
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
        root = Path(tmp)
        served = build_repository(root / "models", configs)
        with TritonProcess(root / "models", root / "run") as triton:
            for round_index in range(args.rounds):
                order = variants if round_index % 2 == 0 else variants[::-1]
                for level in args.concurrency:
                    for variant in order:
                        report = root / f"{variant}-c{level}-r{round_index}.csv"
                        sample = measure(triton, served[variant], level, args, report)
                        if sample is None:
                            unstable[f"{variant} at {level}"] += 1
                        else:
                            results[variant, level].append(sample)

    print(f"text-classifier, perf_analyzer over gRPC, batch-1 requests, median (min–max) of {args.rounds} round(s):")
    print()
    print_tables(results, variants, args.concurrency)
    print()
    if unstable:
        runs = ", ".join(f"{where} ({count}x)" for where, count in unstable.items())
        print(f"left out, no stable measurement within {args.max_trials} windows: {runs}")
    if TARGET_CONCURRENCY in args.concurrency:
        base = results[UNBATCHED, TARGET_CONCURRENCY]
        for variant in (v for v in variants if v != UNBATCHED):
            throughput, p95 = ratios(results[variant, TARGET_CONCURRENCY], base)
            verdict = "met" if throughput >= TARGET_RATIO and p95 <= 1 else "NOT met"
            print(
                f"{variant} at concurrency {TARGET_CONCURRENCY}: {number(throughput, '.2f')}x the unbatched "
                f"throughput, P95 {number(p95, '.2f')}x (target >= {TARGET_RATIO}x with P95 <= 1.00x: {verdict})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
