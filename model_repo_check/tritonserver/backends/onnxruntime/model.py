"""A Python-based Triton backend that runs ONNX models with onnxruntime on the CPU.

Triton loads `<backend-directory>/onnxruntime/model.py` for every model whose config names
backend "onnxruntime" or platform "onnxruntime_onnx", so the serving lab serves
model_repository/ with its configs unchanged (the NGC images carry the C++ backend instead).
Inputs and outputs are matched by name; a batching model's requests of one `execute` call run
as one batch, which is what dynamic batching hands over.

Lab-only config parameter: `lab_execute_delay_ms` (string, milliseconds, default 0) sleeps that
long in every `execute`, making a model honestly slower by a fixed service time (the canary
tests' "slower release"); the C++ backend of the NGC images has no such parameter.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        filename = config.get("default_model_filename") or "model.onnx"
        options = onnxruntime.SessionOptions()
        # One thread per instance: the instance count in config.pbtxt decides the parallelism.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(
            str(Path(args["model_repository"], args["model_version"], filename)),
            options,
            providers=["CPUExecutionProvider"],
        )
        self.batching = int(config.get("max_batch_size", 0)) > 0
        self.inputs = [spec["name"] for spec in config["input"]]
        self.outputs = {spec["name"]: pb_utils.triton_string_to_numpy(spec["data_type"]) for spec in config["output"]}
        delay = config.get("parameters", {}).get("lab_execute_delay_ms", {}).get("string_value", "0")
        self.delay_s = float(delay) / 1000

    def execute(self, requests: list[Any]) -> list[Any]:
        if self.delay_s:
            time.sleep(self.delay_s)
        try:
            if self.batching:
                return self._run_batched(requests)
            return [self._respond(self._run(self._feed(request))) for request in requests]
        except Exception as exc:  # every request of the batch gets the error, Triton counts each as failed
            error = pb_utils.TritonError(f"onnxruntime: {exc}")
            return [pb_utils.InferenceResponse(error=error) for _ in requests]

    def _feed(self, request: Any) -> dict[str, np.ndarray]:
        return {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name in self.inputs}

    def _run(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        results = self.session.run(list(self.outputs), feed)
        return [np.asarray(result, dtype=dtype) for result, dtype in zip(results, self.outputs.values(), strict=True)]

    def _run_batched(self, requests: list[Any]) -> list[Any]:
        feeds = [self._feed(request) for request in requests]
        sizes = [len(feed[self.inputs[0]]) for feed in feeds]
        batch = {name: np.concatenate([feed[name] for feed in feeds]) for name in self.inputs}
        splits = np.cumsum(sizes)[:-1]
        per_output = [np.split(result, splits) for result in self._run(batch)]
        return [self._respond(list(parts)) for parts in zip(*per_output, strict=True)]

    def _respond(self, results: list[np.ndarray]) -> Any:
        tensors = [pb_utils.Tensor(name, result) for name, result in zip(self.outputs, results, strict=True)]
        return pb_utils.InferenceResponse(output_tensors=tensors)
