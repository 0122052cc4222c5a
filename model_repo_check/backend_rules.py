"""The `runtime` field: the backend library Triton loads for the model.

Follows triton-inference-server/core r24.10 (Triton 2.51), src/backend_model.cc
TritonModel::GetBackendLibraryProperties: a runtime of `model.py` selects the Python-based
backend of that name (`<backend-directory>/<backend>/model.py`); any other runtime is a C++
library looked for in the version folder, the model folder and `<backend-directory>/<backend>`,
and it may not escape the folder it is found in.
"""

from __future__ import annotations

import posixpath

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
