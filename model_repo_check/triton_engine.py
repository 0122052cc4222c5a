"""The second engine: the real tritonserver loads the repository and judges every model itself.

`scripts/validate_model_repo --engine triton` starts the tritonserver of the nvidia-pytriton
wheel in .venv-triton (model_repo_check/tritonserver/server.py; 2.51.0, release 24.10, from platform_matrix
`serving_lab`) on this machine's CPU with

- `--model-control-mode=explicit`: nothing loads at start; each model folder is loaded on
  its own through the repository API (gRPC, so any folder name reaches Triton as written),
  and Triton answers per model;
- `--disable-auto-complete-config`: the config is judged as written, as the rules engine
  does (the deployed servers auto-complete through their real backends, see the README);
- a backend directory with the wheel's Python backend, the Python onnxruntime
  backend (model_repo_check/tritonserver/backends) and, for every other backend the validator knows (tensorrt,
  pytorch, tensorflow, openvino), stand_in_backend/stand_in.c compiled into
  `libtriton_<name>.so`: Triton core runs its checks and loads it as the C++ backend it stands
  for (in milliseconds, no stub process), it reads no model file.

A verdict is Triton's own text: the load API's answer, and where that is only "failed to poll
from model repository" (a config that does not parse or validate), the error lines the server
logged during that load. A model that loads although Triton logged errors gets them as a note.
A server that crashes while loading a model is stopped and the load retried on a fresh server
(Triton 2.51 sometimes segfaults when a warmup fails); after the last try, or after a hang, the
model fails with the log's last words. A model that asks for GPUs this machine lacks is "not
checkable", not a failure: Triton 2.51 on a CPU-only machine refuses KIND_GPU instance groups
("... has kind KIND_GPU but no GPUs are available", or "... specifies invalid or unsupported gpu
id 0 ..." when `gpus` are listed) and checks nothing after that.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import tritonclient.grpc as triton_grpc
from tritonclient.utils import InferenceServerException

from model_repo_check.layout import BACKEND_FILES, PLATFORMS, model_folders
from model_repo_check.pbtxt import ConfigParseError, parse_config
from model_repo_check.tritonserver.processes import group_members, stop_group
from model_repo_check.tritonserver.server import TritonProcess, assemble_backends
from platform_matrix.matrix import load as load_matrix

ENGINE_ARGS = ("--model-control-mode=explicit", "--disable-auto-complete-config", "--strict-readiness=false")
STAND_IN = Path(__file__).with_name("stand_in_backend") / "stand_in.c"
CC = ("cc", "-shared", "-fPIC", "-O1")
LOAD_TIMEOUT_S = 120.0
# Triton 2.51 sometimes segfaults when a model's warmup fails (Python backend; about one run in
# three here, the same config loading cleanly with Triton's error in the others): a crash is
# retried on a fresh server this many times before it becomes the verdict.
CRASH_RETRIES = 2
# After a crash line, the moment the dying server takes to write its last words.
CRASH_SETTLE_S = 0.5
CLIENT_GRACE_S = 10.0
POLL_S = 0.1
# What glog writes when tritonserver dies: a signal, or a C++ exception nobody caught.
CRASH = re.compile(r"^(?:Signal \(\d+\) received\.|terminate called after .*|  what\(\): .*)$", re.MULTILINE)
# Error lines of a load: glog errors, and protobuf's own parse error with line:column.
LOG_ERROR = re.compile(r'^(?:E\d{4} \S+ +\d+ \S+\] "(?P<glog>.*)"|\[libprotobuf ERROR [^\]]*\] (?P<proto>.*))$')
# The load API's whole answer when the config did not parse or validate; the reason is in the log.
POLL_FAILED = "failed to poll from model repository"
# Triton's words for an instance group on GPUs this machine does not have.
NO_GPU = re.compile(r"has kind KIND_GPU but no GPUs are available|specifies invalid or unsupported gpu id")


class Status(StrEnum):
    OK = "ok"
    FAILED = "failed"
    NOT_CHECKABLE = "not checkable"


@dataclass(frozen=True)
class Verdict:
    """Triton's judgement of one model folder: `message` is Triton's text ("" when it loaded)."""

    model: str
    status: Status
    message: str
    seconds: float
    notes: tuple[str, ...] = ()

    def __str__(self) -> str:
        text = {Status.OK: "ok", Status.FAILED: "FAILED", Status.NOT_CHECKABLE: "not checkable here"}[self.status]
        lines = [f"{self.model}: {text} ({self.seconds:.1f} s)" + (f": {self.message}" if self.message else "")]
        return "\n".join([*lines, *(f"  note: {note}" for note in self.notes)])


@dataclass
class TritonReport:
    repository: Path
    server_version: str
    release: str | None
    verdicts: list[Verdict] = field(default_factory=list)

    def count(self, status: Status) -> int:
        return sum(v.status is status for v in self.verdicts)

    def failed(self, strict: bool) -> bool:
        """Any model Triton refused; with `strict`, also any it could not judge here."""
        return bool(self.count(Status.FAILED)) or (strict and bool(self.count(Status.NOT_CHECKABLE)))


def engine_backends(target: Path) -> list[str]:
    """Assemble the backend directory in `target`; returns the names that got the stand-in."""
    assemble_backends(target)
    known = {backend for backend, _ in PLATFORMS.values() if backend} | set(BACKEND_FILES)
    stand_ins = sorted(name for name in known if not (target / name).exists())
    if stand_ins:
        library = target / "stand_in.so"
        _compile_stand_in(library)
        for name in stand_ins:
            (target / name).mkdir()
            shutil.copy2(library, target / name / f"libtriton_{name}.so")
        library.unlink()
    return stand_ins


def _compile_stand_in(library: Path) -> None:
    """Build the stand-in backend; raises StandInBuildError naming the compiler's complaint."""
    try:
        subprocess.run([*CC, "-o", str(library), str(STAND_IN)], check=True, capture_output=True, text=True)
    except FileNotFoundError:
        raise StandInBuildError(f"no C compiler `{CC[0]}` to build {STAND_IN} (install gcc: `make deps`)") from None
    except subprocess.CalledProcessError as err:
        raise StandInBuildError(f"{STAND_IN} does not build: {err.stderr.strip()}") from None


class StandInBuildError(RuntimeError):
    """The stand-in backend library could not be compiled."""


def _backend_of(folder: Path) -> str | None:
    try:
        config, _ = parse_config(folder / "config.pbtxt")
    except (ConfigParseError, OSError, UnicodeDecodeError):
        return None
    return config.backend or PLATFORMS.get(config.platform, ("", None))[0] or None


def _notes(folder: Path, stand_ins: Sequence[str]) -> tuple[str, ...]:
    backend = _backend_of(folder)
    if backend in stand_ins:
        return (
            f"backend '{backend}' is a stand-in here: Triton core's checks ran, the backend's own "
            "(the model file against the config) did not",
        )
    if backend == "onnxruntime":
        return (
            "backend 'onnxruntime' is the serving lab's Python one: it runs the model with onnxruntime, "
            "but does not compare the model's inputs and outputs with the config as Triton's C++ backend does",
        )
    return ()


def _release(server_version: str) -> str | None:
    """The NGC release of this server version, from platform_matrix `serving_lab`."""
    triton = load_matrix().serving_lab["triton"]
    return triton["release"] if triton["server_version"] == server_version else None


class _Server:
    """One tritonserver in explicit model-control mode, restarted after a crash or a hang."""

    def __init__(self, repository: Path, run_dir: Path, backends: Path) -> None:
        # TritonProcess.stop() removes the shared memory its Python stubs leave, also after a kill.
        args = [*ENGINE_ARGS, f"--backend-directory={backends}"]  # the last --backend-directory wins
        self.triton = TritonProcess(repository, run_dir, args)
        self.client: triton_grpc.InferenceServerClient | None = None

    def start(self) -> triton_grpc.InferenceServerClient:
        """The client of a running server; a server that died since its last answer (a crash while
        it unloaded a failed model, say) is killed and a fresh one started."""
        if self.client is not None and (CRASH.search(self._log_since(0)) or not group_members(self.triton.pid or 0)):
            self.kill()
        if self.client is None:
            self.triton.start()
            self.client = triton_grpc.InferenceServerClient(self.triton.grpc_url)
        return self.client

    def version(self) -> str:
        return self.start().get_server_metadata().version

    def load(self, name: str, timeout: float) -> tuple[str | None, str]:
        """(the load API's error or None, the error lines logged meanwhile). A crash or a hang
        ends the server and raises _ServerLost with the log's last words."""
        client = self.start()
        pid, offset = self.triton.pid or 0, self.triton.log.stat().st_size
        pool = ThreadPoolExecutor(max_workers=1)
        try:
            # The client waits a little longer than we do, so a hang is ours to end.
            future = pool.submit(client.load_model, name, client_timeout=timeout + CLIENT_GRACE_S)
            try:
                log = self._watch(future, pid, offset, timeout)
            except BaseException:  # a crash, a hang, or an interrupt: nothing may wait on this server
                self.kill()
                raise
            error = future.exception()
        finally:
            # No join here: after an interrupt the call may still wait on a server that the caller's
            # stop() ends; that ends the call too.
            pool.shutdown(wait=False)
        if error is not None and not isinstance(error, InferenceServerException):
            raise error
        return (error.message() if error else None), " | ".join(_log_errors(log))

    def _watch(self, future: Future[None], pid: int, offset: int, timeout: float) -> str:
        """Wait for the load; returns the log written meanwhile. Raises _ServerLost on a crash or a hang."""
        deadline = time.monotonic() + timeout
        while True:
            done = self._wait(future)
            log = self._log_since(offset)
            crashed = bool(CRASH.search(log)) or not group_members(pid) or (done and _unreachable(future))
            if crashed or (not done and time.monotonic() > deadline):
                if crashed:
                    time.sleep(CRASH_SETTLE_S)
                    log = self._log_since(offset)
                last = CRASH.findall(log) or ["it went away" if crashed else f"no answer within {timeout:g} s"]
                words = " | ".join(dict.fromkeys([*_log_errors(log), *(line.strip() for line in last)]))
                raise _ServerLost(words, crashed)
            if done:
                return log

    @staticmethod
    def _wait(future: Future[None]) -> bool:
        try:
            future.exception(timeout=POLL_S)
        except TimeoutError:
            return False
        return True

    def _log_since(self, offset: int) -> str:
        with self.triton.log.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def kill(self) -> None:
        """Stop at once: a crashed tritonserver hangs in its signal handler."""
        self.client = None
        pid = self.triton.pid
        if pid is not None:
            self._kill_group(pid)

    def _kill_group(self, pid: int) -> None:
        """SIGTERM, SIGKILL a second later; TritonProcess.stop() removes the shared memory left."""
        stop_group(pid, timeout=1)
        self.triton.stop()

    def stop(self) -> None:
        """A graceful stop (Triton unloads its models), unless the server crashed (an interrupt
        cut its kill short); interrupted, it kills the server instead."""
        self.client = None
        pid = self.triton.pid
        try:
            if pid is not None and CRASH.search(self._log_since(0)):
                self._kill_group(pid)
            self.triton.stop()
        except BaseException:
            if pid is not None:
                self._kill_group(pid)
            raise


def _unreachable(future: Future[None]) -> bool:
    """The call failed in transport (the server went away under it), not with Triton's answer."""
    error = future.exception()
    return isinstance(error, InferenceServerException) and error.status() == "StatusCode.UNAVAILABLE"


class _ServerLost(RuntimeError):
    def __init__(self, words: str, crashed: bool) -> None:
        super().__init__(words)
        self.crashed = crashed


def _log_errors(log: str) -> list[str]:
    found = []
    for line in log.splitlines():
        if match := LOG_ERROR.match(line):
            text = match.group("glog") or f"protobuf: {match.group('proto')}"
            if text not in found:
                found.append(text)
    return found


def _judge(server: _Server, folder: Path, timeout: float, stand_ins: Sequence[str], retries: int) -> Verdict:
    started, notes = time.monotonic(), _notes(folder, stand_ins)
    for attempt in range(retries + 1):
        try:
            error, logged = server.load(folder.name, timeout)
            break
        except _ServerLost as lost:
            if not lost.crashed or attempt == retries:
                message = f"tritonserver {'died' if lost.crashed else 'hung'} while loading it: {lost}"
                return Verdict(folder.name, Status.FAILED, message, time.monotonic() - started, notes)
            notes += (f"tritonserver crashed on try {attempt + 1} ({lost}); this is the verdict of a fresh server",)
    seconds = time.monotonic() - started
    if error is None:
        if logged:  # loaded, but Triton logged errors (a listed version without its folder, ...)
            notes += (f"Triton logged: {logged}",)
        return Verdict(folder.name, Status.OK, "", seconds, notes)
    message = _condense(error)
    if POLL_FAILED in message and logged:  # the reason is only in the log
        message = f"{message} | {logged}"
    if NO_GPU.search(message):
        message += " (this machine has no GPU that Triton can use: the rest of this model's load was not checked)"
        return Verdict(folder.name, Status.NOT_CHECKABLE, message, seconds, notes)
    return Verdict(folder.name, Status.FAILED, message, seconds, notes)


def _condense(error: str) -> str:
    """Triton's error without its repeats: a failed warmup repeats its reason once per request."""
    parts = [part.strip() for part in error.strip().split("; ")]
    return "; ".join(dict.fromkeys(part for part in parts if part and part != ";"))


def check_with_triton(
    repository: Path,
    models: Sequence[str] | None = None,
    timeout: float = LOAD_TIMEOUT_S,
    crash_retries: int = CRASH_RETRIES,
) -> TritonReport:
    """Load every model folder of `repository` (or only `models`) into the real tritonserver.
    Raises model_repo_check.tritonserver.server.TritonNotInstalledError (it names `make .venv-triton/.stamp`)
    when the venv is missing, model_repo_check.tritonserver.processes.ServerError when the server does not start.
    `crash_retries`: how often a load that crashed the server is tried again on a fresh one."""
    repository = repository.resolve()
    folders = [repository / name for name in models] if models is not None else model_folders(repository)
    with tempfile.TemporaryDirectory(prefix="triton-engine-") as scratch:
        stand_ins = engine_backends(Path(scratch) / "engine-backends")
        server = _Server(repository, Path(scratch) / "run", Path(scratch) / "engine-backends")
        try:
            version = server.version()
            report = TritonReport(repository, version, _release(version))
            for folder in folders:
                report.verdicts.append(_judge(server, folder, timeout, stand_ins, crash_retries))
        finally:
            server.stop()
    return report
