"""A stand-in for a Triton backend that the nvidia-pytriton wheel lacks (tensorrt, pytorch, ...).

`scripts/validate_model_repo --engine triton` installs this file as
`<backend-directory>/<name>/model.py`; Triton then loads it as a Python-based backend for
every model whose config names backend <name> (or a platform served by it), so Triton core
runs all of its own load-time checks on the config: scheduling, instance groups, labels,
warmup requests. The stand-in reads no model file and checks nothing of it: it answers every
request with zeros of the declared output shapes (empty strings for TYPE_STRING), which is
enough for warmup. The Python backend has no bfloat16, so TYPE_BF16 outputs are left out.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.batching = int(config.get("max_batch_size", 0)) > 0
        self.first_input = config["input"][0]["name"] if config.get("input") else None
        self.outputs = [
            (spec["name"], pb_utils.TRITON_STRING_TO_NUMPY[spec["data_type"]], [int(d) for d in spec["dims"]])
            for spec in config.get("output", [])
            if spec["data_type"] in pb_utils.TRITON_STRING_TO_NUMPY
        ]

    def execute(self, requests: list[Any]) -> list[Any]:
        return [pb_utils.InferenceResponse(output_tensors=self._zeros(request)) for request in requests]

    def _zeros(self, request: Any) -> list[Any]:
        lead: list[int] = []
        if self.batching and self.first_input is not None:
            lead = [pb_utils.get_input_tensor_by_name(request, self.first_input).shape()[0]]
        tensors = []
        for name, dtype, dims in self.outputs:
            shape = lead + [1 if d == -1 else d for d in dims]
            zeros = np.full(shape, b"", dtype=object) if dtype is np.object_ else np.zeros(shape, dtype=dtype)
            tensors.append(pb_utils.Tensor(name, zeros))
        return tensors
