"""Record the Triton scrape that monitoring/metric_names.py reads Triton's metric names from.

    .venv/bin/python -m monitoring.triton_scrape      (needs `make .venv-triton/.stamp`)

starts the serving lab's real tritonserver (model_repo_check/tritonserver/server.py: release 24.10, server 2.51,
`--metrics-config=summary_latencies=true`) on model_repository/, sends every loaded model
version a bounded perf_analyzer load, and writes its /metrics to TRITON_SCRAPE. A serving_lab
test scrapes the live lab the same way and compares the names.
"""

from __future__ import annotations

import json
import sys
import tempfile
import urllib.request
from pathlib import Path

from model_repo_check.tritonserver.server import TritonProcess, perf_analyzer
from monitoring.metric_names import ROOT, TRITON_SCRAPE

MODEL_REPOSITORY = ROOT / "model_repository"
REQUESTS = 200  # per model version: enough for every counter, summary quantile and duration to move


def ready_versions(http_url: str) -> list[tuple[str, str]]:
    """(model, version) of every version Triton reports READY (its repository index)."""
    request = urllib.request.Request(f"{http_url}/v2/repository/index", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        index = json.load(response)
    return sorted((entry["name"], entry["version"]) for entry in index if entry.get("state") == "READY")


def load(http_url: str, requests: int = REQUESTS) -> None:
    """A bounded perf_analyzer run (concurrency 4, random inputs) on every ready model version."""
    target = http_url.removeprefix("http://")
    for model, version in ready_versions(http_url):
        run = perf_analyzer(
            *("-m", model, "-x", version, "-u", target, "-i", "http"),
            "--concurrency-range=4",
            f"--request-count={requests}",
            timeout=300,
        )
        if run.returncode != 0:
            raise RuntimeError(f"perf_analyzer failed on {model} version {version}:\n{run.stdout[-2000:]}{run.stderr}")


def scrape(metrics_url: str) -> str:
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        return response.read().decode("utf-8")


def record(out: Path = TRITON_SCRAPE) -> Path:
    with (
        tempfile.TemporaryDirectory(prefix="triton-scrape-") as run_dir,
        TritonProcess(MODEL_REPOSITORY, Path(run_dir)) as triton,
    ):
        load(triton.http_url)
        text = scrape(triton.metrics_url)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out


if __name__ == "__main__":
    print(f"wrote {record().relative_to(ROOT)}", file=sys.stderr)
