"""make bench-gateway: what serving.gateway adds to Triton, measured on the real tritonserver.

One tritonserver (model_repo_check.tritonserver, `.venv-triton`) serves model_repository/ on this machine's
CPU, one gateway (lab_fleet.gateway, default settings) stands in front of it. The same closed-
loop load drives both from one Python asyncio process: C coroutines, each sending its next
text-classifier request when the last one is answered, for a window after a warm-up. Direct:
tritonclient.grpc.aio (numpy in, numpy out, what a gRPC client does); through the gateway:
httpx.AsyncClient with C keep-alive connections, business JSON in and out. So "added" is what a
client sees: the gateway's own work plus the cost of HTTP and JSON on the client side. The
gateway's own share is printed beside it, from its metrics: the mean of
gateway_request_duration_seconds minus the mean of gateway_triton_request_duration_seconds.
The two paths are interleaved level by level and round by round (the order flips every round);
the medians over the rounds are printed, as a Markdown table.

Target: at most 2 ms added P95 at a load where direct Triton meets its SLO (P99 at most
monitoring.rules.LATENCY_P99_TARGET_US).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import numpy as np
import tritonclient.grpc.aio as grpcaio
from tritonclient.grpc import InferInput

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lab_fleet.gateway import GatewayProcess  # noqa: E402
from model_repo_check.tritonserver.processes import group_members  # noqa: E402
from model_repo_check.tritonserver.server import TritonProcess  # noqa: E402
from monitoring.rules import LATENCY_P99_TARGET_US  # noqa: E402

MODEL = "text-classifier"
TARGET_ADDED_P95_MS = 2.0
PATHS = ("direct", "gateway")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Run:
    p50_ms: float
    p95_ms: float
    p99_ms: float
    throughput: float
    errors: int
    cpu_ms: dict[str, float]  # CPU ms per answered request: client, triton (server and stubs), gateway
    gateway_own_ms: float | None = None  # mean time inside the gateway, without the Triton call


Call = Callable[[int], Awaitable[bool]]


async def closed_loop(call: Call, concurrency: int, warmup: float, window: float) -> tuple[list[float], int, int]:
    """Latencies (s) of the requests answered inside the window, how many were answered in all
    (warm-up included), and the failures inside the window."""
    start = time.perf_counter()
    begin, end = start + warmup, start + warmup + window
    latencies: list[float] = []
    errors = answered = 0

    async def worker(index: int) -> None:
        nonlocal errors, answered
        sent = index
        while (now := time.perf_counter()) < end:
            ok = await call(sent)
            done = time.perf_counter()
            sent += concurrency
            answered += 1
            if begin <= now and done <= end:
                latencies.append(done - now)
                errors += not ok

    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return latencies, answered, errors


def cpu_seconds(groups: dict[str, int]) -> dict[str, float]:
    """CPU seconds used so far by this process (the client, with gRPC's threads) and by the live
    processes of each server's process group (read from /proc)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    found = {"client": usage.ru_utime + usage.ru_stime}
    for name, pgid in groups.items():
        found[name] = 0.0
        for pid in group_members(pgid):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            found[name] += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime
    return found


def summarize(
    latencies: list[float], window: float, errors: int, cpu_ms: dict[str, float], own_ms: float | None = None
) -> Run:
    ms = np.asarray(latencies) * 1000
    p50, p95, p99 = (float(np.percentile(ms, q)) for q in (50, 95, 99))
    return Run(p50, p95, p99, len(latencies) / window, errors, cpu_ms, own_ms)


def _histogram_mean(metrics: str, name: str) -> tuple[float, float]:
    """(sum, count) of one model's histogram in a /metrics text, over every other label (code)."""
    values = {}
    for suffix in ("sum", "count"):
        series = re.finditer(rf"^{name}_{suffix}{{([^}}]*)}} (\S+)$", metrics, re.MULTILINE)
        values[suffix] = sum(float(s.group(2)) for s in series if f'model="{MODEL}"' in s.group(1).split(","))
    return values["sum"], values["count"]


def gateway_own(before: str, after: str) -> float:
    """Mean ms per request spent in the gateway outside its Triton call, between two scrapes."""
    means = []
    for name in ("gateway_request_duration_seconds", "gateway_triton_request_duration_seconds"):
        (sum0, count0), (sum1, count1) = _histogram_mean(before, name), _histogram_mean(after, name)
        means.append((sum1 - sum0) / max(count1 - count0, 1))
    return (means[0] - means[1]) * 1000


async def measure(
    path: str, triton: str, gateway: str, groups: dict[str, int], concurrency: int, args: argparse.Namespace
) -> Run:
    embeddings = np.random.default_rng(16).standard_normal((64, 32)).astype(np.float32)
    bodies = [{"embedding": row.tolist()} for row in embeddings]
    if path == "direct":
        async with grpcaio.InferenceServerClient(triton) as client:

            async def direct(i: int) -> bool:
                tensor = InferInput("embedding", [1, 32], "FP32")
                tensor.set_data_from_numpy(embeddings[i % 64][np.newaxis])
                result = await client.infer(MODEL, [tensor])
                return result.as_numpy("probabilities") is not None

            latencies, cpu, errors = await _timed(direct, groups, concurrency, args)
        return summarize(latencies, args.window, errors, cpu)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(gateway, connector=connector) as client:

        async def through(i: int) -> bool:
            async with client.post(f"/v1/{MODEL}", json=bodies[i % 64]) as response:
                return response.status == 200 and "label" in await response.json()

        async with client.get("/metrics") as response:
            before = await response.text()
        latencies, cpu, errors = await _timed(through, groups, concurrency, args)
        async with client.get("/metrics") as response:
            after = await response.text()
    return summarize(latencies, args.window, errors, cpu, gateway_own(before, after))


async def _timed(
    call: Call, groups: dict[str, int], concurrency: int, args: argparse.Namespace
) -> tuple[list[float], dict[str, float], int]:
    """closed_loop, with the CPU ms per answered request of each process (warm-up included)."""
    before = cpu_seconds(groups)
    latencies, answered, errors = await closed_loop(call, concurrency, args.warmup, args.window)
    after = cpu_seconds(groups)
    return latencies, {name: (after[name] - before[name]) * 1000 / max(answered, 1) for name in after}, errors


def median(runs: list[Run], value: Callable[[Run], float]) -> float:
    return statistics.median(value(run) for run in runs)


def report(results: dict[tuple[str, int], list[Run]], levels: list[int]) -> bool:
    target_us = LATENCY_P99_TARGET_US
    print(
        "| concurrency | path | P50 ms | P95 ms | P99 ms | req/s | added P50 ms | added P95 ms | throughput ratio"
        " | gateway's own ms (mean) | CPU ms/request: client, triton, gateway | verdict |"
    )
    print("| ---: | --- " + "| ---: " * 9 + "| --- |")
    met = False
    for level in levels:
        row = {}
        for path in PATHS:
            runs = results[path, level]
            row[path] = {
                q: median(runs, lambda r, q=q: getattr(r, q)) for q in ("p50_ms", "p95_ms", "p99_ms", "throughput")
            }
            cpu = ", ".join(f"{median(runs, lambda r, n=n: r.cpu_ms[n]):.2f}" for n in ("client", "triton", "gateway"))
            row[path]["cpu"] = cpu
        direct, gateway = row["direct"], row["gateway"]
        slo = direct["p99_ms"] * 1000 <= target_us
        added50, added95 = gateway["p50_ms"] - direct["p50_ms"], gateway["p95_ms"] - direct["p95_ms"]
        verdict = "direct misses its SLO" if not slo else "meets target" if added95 <= TARGET_ADDED_P95_MS else "misses"
        met |= slo and added95 <= TARGET_ADDED_P95_MS
        own = median(results["gateway", level], lambda r: r.gateway_own_ms or 0.0)
        print(
            f"| {level} | direct | {direct['p50_ms']:.2f} | {direct['p95_ms']:.2f} | {direct['p99_ms']:.2f}"
            f" | {direct['throughput']:,.0f} | | | | | {direct['cpu']} | |"
        )
        print(
            f"| {level} | gateway | {gateway['p50_ms']:.2f} | {gateway['p95_ms']:.2f} | {gateway['p99_ms']:.2f}"
            f" | {gateway['throughput']:,.0f} | {added50:.2f} | {added95:.2f}"
            f" | {gateway['throughput'] / direct['throughput']:.2f} | {own:.2f} | {gateway['cpu']} | {verdict} |"
        )
    errors = sum(run.errors for runs in results.values() for run in runs)
    print(f"\nmedians of {len(next(iter(results.values())))} interleaved rounds; failed requests: {errors}")
    print(
        f"target: added P95 <= {TARGET_ADDED_P95_MS:g} ms where direct P99 <= {target_us / 1000:g} ms"
        f" (monitoring.rules.LATENCY_P99_TARGET_US): {'met' if met else 'NOT met'}"
    )
    return met and errors == 0


async def bench(triton: TritonProcess, gateway: GatewayProcess, args: argparse.Namespace) -> bool:
    results: dict[tuple[str, int], list[Run]] = {}
    groups = {"triton": triton.pid or 0, "gateway": gateway.pid or 0}
    for round_ in range(args.rounds):
        for level in args.concurrency:
            for path in PATHS if round_ % 2 == 0 else PATHS[::-1]:
                run = await measure(path, triton.grpc_url, gateway.url, groups, level, args)
                results.setdefault((path, level), []).append(run)
                print(f"round {round_ + 1} concurrency {level} {path}: {run}", file=sys.stderr)
    return report(results, args.concurrency)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16], help="levels (1 4 16)")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds before each window (1)")
    parser.add_argument("--window", type=float, default=5.0, help="measured seconds per run (5)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as folder:
        run_dir = Path(folder)
        with (
            TritonProcess(REPO / "model_repository", run_dir / "triton") as triton,
            GatewayProcess(triton.grpc_url, run_dir / "gateway") as gateway,
        ):
            return 0 if asyncio.run(bench(triton, gateway, args)) else 1


if __name__ == "__main__":
    sys.exit(main())
