"""The golden-set accuracy check of a canary release: the same labelled inputs to both tracks.

    python -m serving.canary.golden --stable HOST:PORT --canary HOST:PORT --model NAME \\
        --golden PATH --max-drop 0.5

Each URL is a Triton gRPC address. The golden set is a CSV shipped with the model
(`model_repository/<model>/golden.csv`): one column per element of the model's single input
tensor, named `<input>_<index>` in order, and a `label` column holding a class name of the labelled
output's label file (`label_filename` in config.pbtxt). Each track is asked for that output with
Triton's classification extension (top 1), so the class names come from the served model's own
label file. One row per request, as user traffic arrives: the golden requests are real requests
in Triton's latency summary, and batches would have put slow batch-16 requests into the canary's
P95 (in the lab they made an equal canary's P95 up to 2.7x the stable's).

Exit status: 0 when canary accuracy >= stable accuracy - max-drop (percentage points), 1 when
lower, 2 when the check could not be made (bad arguments or golden file, a track unreachable or
not serving the model, a model whose config does not fit the golden set). One JSON line on stdout
reports both accuracies and the verdict; errors go to stderr naming the file, line or track.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype, triton_to_np_dtype

PASS, FAIL, INCONCLUSIVE = 0, 1, 2
LABEL_COLUMN = "label"


class GoldenError(Exception):
    """The check cannot be made; the message names what is wrong and where."""


@dataclass(frozen=True)
class GoldenSet:
    inputs: np.ndarray  # [rows, elements], float64 as read
    labels: list[str]
    input_name: str


def read_golden(path: Path) -> GoldenSet:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise GoldenError(f"{path}: cannot read the golden set: {exc.strerror}") from exc
    with handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if not header or header[-1] != LABEL_COLUMN or len(header) < 2:
            raise GoldenError(f"{path}:1: the header must be <input>_0..<input>_N-1 then {LABEL_COLUMN!r}")
        input_name = header[0].rsplit("_", 1)[0]
        expected = [f"{input_name}_{index}" for index in range(len(header) - 1)]
        if header[:-1] != expected:
            raise GoldenError(f"{path}:1: feature columns must be {expected[0]}..{expected[-1]} in order")
        rows, labels = [], []
        for line, row in enumerate(reader, start=2):
            if len(row) != len(header):
                raise GoldenError(f"{path}:{line}: {len(row)} fields, the header has {len(header)}")
            try:
                rows.append([float(value) for value in row[:-1]])
            except ValueError as exc:
                raise GoldenError(f"{path}:{line}: {exc}") from exc
            labels.append(row[-1])
    if not rows:
        raise GoldenError(f"{path}: no labelled rows")
    return GoldenSet(np.asarray(rows), labels, input_name)


@dataclass(frozen=True)
class Served:
    """What one track's model config says about the golden set's input and labelled output."""

    dtype: np.dtype
    shape: list[int]
    output: str
    max_batch_size: int


def _served(client: grpcclient.InferenceServerClient, track: str, model: str, golden: GoldenSet) -> Served:
    if not client.is_model_ready(model):
        raise GoldenError(f"{track}: model {model!r} is not ready")
    config = client.get_model_config(model, as_json=True)["config"]
    inputs = config.get("input", [])
    if len(inputs) != 1 or inputs[0]["name"] != golden.input_name:
        names = [spec["name"] for spec in inputs]
        raise GoldenError(
            f"{track}: {model!r} has inputs {names}, the golden set feeds one named {golden.input_name!r}"
        )
    shape = [int(dim) for dim in inputs[0].get("dims", [])]
    if int(np.prod(shape)) != golden.inputs.shape[1]:
        raise GoldenError(f"{track}: {model!r} input dims {shape}, the golden set has {golden.inputs.shape[1]} columns")
    labelled = [spec["name"] for spec in config.get("output", []) if spec.get("label_filename")]
    if len(labelled) != 1:
        raise GoldenError(f"{track}: {model!r} needs exactly one output with a label_filename, has {labelled}")
    return Served(
        np.dtype(triton_to_np_dtype(inputs[0]["data_type"].removeprefix("TYPE_"))),
        shape,
        labelled[0],
        int(config.get("max_batch_size", 0)),
    )


def _predict(
    client: grpcclient.InferenceServerClient, model: str, served: Served, name: str, rows: np.ndarray
) -> list[str]:
    tensor = rows.astype(served.dtype).reshape([len(rows), *served.shape])
    if served.max_batch_size == 0:
        tensor = tensor[0]
    inputs = [grpcclient.InferInput(name, list(tensor.shape), np_to_triton_dtype(served.dtype))]
    inputs[0].set_data_from_numpy(tensor)
    output = grpcclient.InferRequestedOutput(served.output, class_count=1)
    result = client.infer(model, inputs, outputs=[output]).as_numpy(served.output)
    # Each entry reads b"<score>:<index>:<label>" (the classification extension, top 1).
    return [entry.decode().split(":", 2)[2] for entry in np.asarray(result).reshape(-1)]


def accuracy(url: str, track: str, model: str, golden: GoldenSet, concurrency: int = 8) -> float:
    """Percentage of golden rows whose top-1 class on this track equals the label: one row per
    request, `concurrency` requests in flight (each worker thread with its own client)."""
    local = threading.local()

    def predict(row: int) -> list[str]:
        if not hasattr(local, "client"):
            local.client = grpcclient.InferenceServerClient(url)
            clients.append(local.client)
        return _predict(local.client, model, served, golden.input_name, golden.inputs[row : row + 1])

    clients: list[grpcclient.InferenceServerClient] = []
    try:
        with grpcclient.InferenceServerClient(url) as client:
            served = _served(client, track, model, golden)
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            predicted = [label for labels in pool.map(predict, range(len(golden.labels))) for label in labels]
    except InferenceServerException as exc:
        raise GoldenError(f"{track} ({url}): {exc.message()}") from exc
    finally:
        for opened in clients:
            opened.close()
    correct = sum(p == label for p, label in zip(predicted, golden.labels, strict=True))
    return 100.0 * correct / len(golden.labels)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m serving.canary.golden", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stable", required=True, help="the stable track's Triton gRPC address, HOST:PORT")
    parser.add_argument("--canary", required=True, help="the canary track's Triton gRPC address, HOST:PORT")
    parser.add_argument("--model", required=True, help="the model name in both tracks")
    parser.add_argument("--golden", required=True, type=Path, help="the golden-set CSV")
    parser.add_argument("--max-drop", type=float, default=0.5, help="percentage points the canary may lose")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight per track")
    args = parser.parse_args(argv)
    if args.concurrency < 1:
        parser.error(f"--concurrency {args.concurrency}: must be at least 1")
    if not 0 <= args.max_drop <= 100:
        parser.error(f"--max-drop {args.max_drop}: must be 0..100 percentage points")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)  # argparse exits 2 on bad arguments, the "inconclusive" status
    try:
        golden = read_golden(args.golden)
        stable = accuracy(args.stable, "stable", args.model, golden, args.concurrency)
        canary = accuracy(args.canary, "canary", args.model, golden, args.concurrency)
    except GoldenError as exc:
        print(f"golden: {exc}", file=sys.stderr)
        return INCONCLUSIVE
    drop = round(stable - canary, 9)  # 23.8 - 23.3 is 0.5000000000000036 in floats
    verdict = PASS if drop <= args.max_drop else FAIL
    report = {
        "model": args.model,
        "rows": len(golden.labels),
        "stable_accuracy": round(stable, 3),
        "canary_accuracy": round(canary, 3),
        "drop_points": round(drop, 3),
        "max_drop_points": args.max_drop,
        "verdict": "pass" if verdict == PASS else "fail",
    }
    print(json.dumps(report))
    return verdict


if __name__ == "__main__":
    sys.exit(main())
