"""A real tritonserver on this machine's CPU, from PyPI's nvidia-pytriton wheel in .venv-triton.

The wheel carries the server and its Python backend; the run dir gets a backend directory
that holds that backend (with the stub for the venv's Python) and the Python-based
onnxruntime backend of backends/, so model_repository/ loads with its configs as committed.
Versions come from platform_matrix/matrix.yml (`serving_lab`); `make .venv-triton/.stamp` builds
the venv. The model validator's Triton engine and the serving lab both start it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from pathlib import Path

from model_repo_check.tritonserver.processes import LOOPBACK, ServerError, ServerProcess, free_port

REPO = Path(__file__).resolve().parents[2]
TRITON_VENV = REPO / ".venv-triton"
BACKEND_SOURCES = Path(__file__).with_name("backends")
SHM = Path("/dev/shm")


class TritonNotInstalledError(RuntimeError):
    pass


def _site_packages() -> Path:
    """The venv's site-packages; raises naming the make target when the venv is not built."""
    found = sorted(TRITON_VENV.glob("lib/python3.*/site-packages"))
    if not (TRITON_VENV / ".stamp").exists() or not found or not (found[-1] / "pytriton/tritonserver").is_dir():
        raise TritonNotInstalledError(
            f"{TRITON_VENV} is missing or incomplete: run `make .venv-triton/.stamp` (needs the main venv)"
        )
    return found[-1]


def _env(*library_dirs: Path) -> dict[str, str]:
    """The process environment: the venv's bin/ first on PATH (the backend stub finds numpy
    through it, it ignores PYTHONPATH) and the given directories on LD_LIBRARY_PATH."""
    env = dict(os.environ)
    env["PATH"] = f"{TRITON_VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["LD_LIBRARY_PATH"] = os.pathsep.join([*map(str, library_dirs), env.get("LD_LIBRARY_PATH", "")]).rstrip(":")
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    return env


def python_backends() -> list[str]:
    """The backends that run Python stubs: the wheel's `python` and the Python-based ones of backends/."""
    return ["python", *sorted(b.name for b in BACKEND_SOURCES.iterdir() if (b / "model.py").is_file())]


def remove_shm(prefix: str) -> None:
    """Remove the /dev/shm regions a stopped server's Python stubs left under its own prefix."""
    for region in SHM.glob(f"{prefix}*"):
        region.unlink(missing_ok=True)


def assemble_backends(target: Path) -> Path:
    """A backend directory: the wheel's `python` backend with its stub, plus backends/*."""
    site = _site_packages()
    server = site / "pytriton/tritonserver"
    python_version = site.parent.name.removeprefix("python")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(server / "backends/python", target / "python", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(server / f"python_backend_stubs/{python_version}/triton_python_backend_stub", target / "python")
    for backend in BACKEND_SOURCES.iterdir():
        if (backend / "model.py").is_file():
            shutil.copytree(backend, target / backend.name, ignore=shutil.ignore_patterns("__pycache__"))
    return target


class TritonProcess(ServerProcess):
    """tritonserver on free loopback ports; `with TritonProcess(...) as triton:` stops it on exit.

    Each Python stub shares a region of /dev/shm with the server, named after the backend's
    `shm-region-prefix-name` (default `triton_<backend>_backend_shm_region_`). A stub killed with
    its process group leaves its region behind (8 of 20 did in a plain stop); the server gives
    them a prefix of its own and `stop()` removes what is left under it, and only that."""

    name = "tritonserver"

    def __init__(self, model_repository: Path | str, run_dir: Path, extra_args: Sequence[str] = ()) -> None:
        # A folder, or a cloud repository as Triton takes it (`s3://http://127.0.0.1:9000/bucket/prefix`
        # for an S3 endpoint of one's own, with the AWS_* variables and TRITON_AWS_MOUNT_DIRECTORY in
        # the environment): a URI stays a string, since a Path would fold its `//`.
        uri = isinstance(model_repository, str) and "://" in model_repository
        self.model_repository = model_repository if uri else Path(model_repository)
        self.run_dir = Path(run_dir)
        self.extra_args = list(extra_args)
        self.ports: dict[str, int] = {}
        self.shm_prefix = f"triton_lab_{uuid.uuid4().hex[:12]}_"
        super().__init__(self.run_dir / "tritonserver.log")

    def _port(self, name: str) -> int:
        if name not in self.ports:
            raise RuntimeError("tritonserver has no ports yet: start() chooses them")
        return self.ports[name]

    @property
    def http_url(self) -> str:
        return f"http://{LOOPBACK}:{self._port('http')}"

    @property
    def grpc_url(self) -> str:
        return f"{LOOPBACK}:{self._port('grpc')}"

    @property
    def metrics_url(self) -> str:
        return f"http://{LOOPBACK}:{self._port('metrics')}/metrics"

    def command(self) -> list[str]:
        server = _site_packages() / "pytriton/tritonserver/bin/tritonserver"
        return [
            str(server),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={self.run_dir / 'backends'}",
            f"--http-address={LOOPBACK}",
            f"--http-port={self._port('http')}",
            f"--grpc-address={LOOPBACK}",
            f"--grpc-port={self._port('grpc')}",
            f"--metrics-address={LOOPBACK}",
            f"--metrics-port={self._port('metrics')}",
            "--allow-sagemaker=false",
            "--allow-vertex-ai=false",
            "--allow-gpu-metrics=false",
            "--metrics-config=summary_latencies=true",
            *(f"--backend-config={name},shm-region-prefix-name={self.shm_prefix}" for name in python_backends()),
            *self.extra_args,
        ]

    def start(self, timeout: float = 60) -> None:
        """Start on fresh free ports and wait for readiness; a server already started stays as it is."""
        if self.running:
            return
        site = _site_packages()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        assemble_backends(self.run_dir / "backends")
        self.ports = {name: free_port() for name in ("http", "grpc", "metrics")}
        env = _env(site / "nvidia_pytriton.libs")
        self._launch(self.command(), env, f"{self.http_url}/v2/health/ready", timeout)

    def stop(self) -> None:
        super().stop()
        remove_shm(self.shm_prefix)


def perf_analyzer(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the perf_analyzer of the venv's tritonclient wheel (it loads libcudart even on the CPU)."""
    site = _site_packages()
    binary = TRITON_VENV / "bin/perf_analyzer"
    if not binary.exists():
        raise TritonNotInstalledError(f"{binary} is missing: run `make .venv-triton/.stamp`")
    return subprocess.run(
        [str(binary), *args],
        env=_env(site / "nvidia/cuda_runtime/lib"),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


__all__ = ["TRITON_VENV", "ServerError", "TritonNotInstalledError", "TritonProcess", "perf_analyzer", "remove_shm"]
