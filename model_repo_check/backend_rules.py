"""The libraries a config names: `runtime` (the backend library) and TRITON_BATCH_STRATEGY_PATH.

Follows triton-inference-server/core r24.10 (Triton 2.51), src/backend_model.cc
TritonModel::GetBackendLibraryProperties: a runtime of `model.py` selects the Python-based
backend of that name (`<backend-directory>/<backend>/model.py`); any other runtime is a C++
library looked for in the version folder, the model folder and `<backend-directory>/<backend>`,
and it may not escape the folder it is found in. TritonModel::Create: a custom batching
strategy (parameter TRITON_BATCH_STRATEGY_PATH) is refused with the sequence batcher, and must
exist otherwise.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from model_repo_check.findings import Report
from model_repo_check.layout import ModelDir

PYTHON_RUNTIME = "model.py"
# Backends the NGC tritonserver image ships, and those of them that are Python-based runtimes
# too (the pytorch backend's PyTorch 2 runtime is backends/pytorch/model.py).
SHIPPED_BACKENDS = frozenset({"onnxruntime", "tensorrt", "pytorch", "tensorflow", "openvino", "python", "fil", "dali"})
PYTHON_BASED_RUNTIMES = frozenset({"python", "pytorch"})


def check_runtime(model: ModelDir, report: Report) -> None:
    runtime, backend = model.config.runtime, model.backend
    if not runtime or model.config.platform == "ensemble":
        return
    at = model.where.find("runtime")
    name = model.config.name
    if runtime == PYTHON_RUNTIME:
        if backend in SHIPPED_BACKENDS and backend not in PYTHON_BASED_RUNTIMES:
            report.error(
                "runtime",
                f"unable to find Python backend based backend library '{runtime}' for model '{name}', searched: "
                f"'<backend-directory>/{backend}/{PYTHON_RUNTIME}' (the '{backend}' backend is a C++ library only)",
                at,
            )
        return
    if posixpath.normpath(runtime).startswith("..") or runtime.startswith("/"):
        report.error(
            "runtime",
            f"backend library name '{runtime}' escapes backend directory, for model '{name}', check model config "
            "runtime field",
            at,
        )
        return
    local = [model.path / runtime, *(folder / runtime for folder in model.versions.values())]
    shipped = backend in SHIPPED_BACKENDS and runtime == f"libtriton_{backend}.so"
    if not shipped and not any(path.is_file() for path in local):
        report.error(
            "runtime",
            f"unable to find backend library '{runtime}' for model '{name}', searched: the version folders, "
            f"'{model.path}' and '<backend-directory>/{backend}' (which holds libtriton_{backend}.so)",
            at,
        )


def check_batch_strategy(model: ModelDir, report: Report) -> None:
    config = model.config
    if "TRITON_BATCH_STRATEGY_PATH" not in config.parameters or config.platform == "ensemble":
        return  # an ensemble is no backend model: TritonModel::Create does not run for it
    at = model.where.find("parameters")
    if config.HasField("sequence_batching"):
        report.error(
            "batch-strategy",
            "TRITON_BATCH_STRATEGY_PATH cannot be specified with sequence batcher, using default batching strategy",
            at,
        )
        return
    path = config.parameters["TRITON_BATCH_STRATEGY_PATH"].string_value
    if not Path(path).exists():
        report.error(
            "batch-strategy",
            f"Batching library path not found: {path} (a path on the Triton server; checked on this machine)",
            at,
        )
