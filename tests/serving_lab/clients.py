"""Clients of the lab's Triton: one inference over gRPC, and perf_analyzer load; and the sum of a
metric's samples in a Prometheus /metrics page."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import np_to_triton_dtype

from model_repo_check.tritonserver.server import TritonProcess, perf_analyzer


def infer(
    triton: TritonProcess, model: str, inputs: dict[str, np.ndarray], version: str = ""
) -> grpcclient.InferResult:
    tensors = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    with grpcclient.InferenceServerClient(triton.grpc_url) as client:
        return client.infer(model, tensors, model_version=version)


def drive_load(triton: TritonProcess, model: str, seconds: float, *args: str) -> subprocess.CompletedProcess[str]:
    """perf_analyzer over gRPC on `model` for about `seconds`: measurement windows of a third
    each, any three in a row accepted as stable (the suite wants load on the server, not a
    benchmark). A window with no completed request is never stable (a CI run saw one when the
    2-core machine stalled), so perf_analyzer may try up to ten windows before it gives up."""
    window_ms = max(int(seconds * 1000 / 3), 200)
    result = perf_analyzer(
        *("-m", model, "-u", triton.grpc_url, "-i", "grpc"),
        *("--measurement-mode", "time_windows", "--measurement-interval", str(window_ms)),
        *("--stability-percentage", "1000", "--max-trials", "10"),
        *args,
        timeout=seconds * 4 + 60,
    )
    assert result.returncode == 0, (
        f"perf_analyzer on {model} exited {result.returncode}:\n{result.stdout}{result.stderr}"
    )
    return result


def metric_sum(metrics: str, name: str, required: bool = False, **labels: str) -> float:
    """The sum of `name`'s samples carrying `labels` in a /metrics page; `required`: none is a failure."""
    total, found = 0.0, False
    for line in metrics.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            have = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
            if all(have.get(key) == value for key, value in labels.items()):
                total, found = total + float(line.rsplit(" ", 1)[1]), True
    assert found or not required, f"no sample of {name} with {labels} in the /metrics page"
    return total
