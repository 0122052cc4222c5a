"""Local server processes: loopback ports, process groups, readiness.

Every server runs in its own session (process group), so stopping it also stops what it
started (Triton's Python backend stubs). Groups are found through /proc, which works from
another process too (`scripts/serve-lab down`), and zombies count as gone: a server may outlive
the process that started it, and PID 1 here need not reap it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Self

import port_for

LOOPBACK = "127.0.0.1"


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """A SIGTERM (a CI timeout, `kill`) ends the run like Ctrl-C, so `finally` blocks and fixture
    teardowns still stop the servers; by default it would end Python at once and leave them."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing uses right now, chosen at random by port-for among the
    ports IANA leaves unassigned, outside the kernel's ephemeral range: the source port of an
    outgoing connection, which the kernel takes from that range, never lands on it before the
    server binds it (a port that the kernel handed out for binding to port 0 could). Another
    process choosing the same port meanwhile is still possible: the server then exits saying
    "already in use", and the caller starts it again on new ports."""
    return port_for.select_random()


def spawn(
    argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None, *, outlive_caller: bool = False
) -> subprocess.Popen[bytes]:
    """Start argv in a new session, stdout and stderr to `log` (truncated).

    Unless `outlive_caller`, the kernel sends the server SIGTERM when the calling process dies
    (util-linux's `setpriv --pdeathsig`, which then execs argv): a test run killed before its
    teardown (an xdist worker ended by its controller on an interrupt) leaves no server behind.
    Only a server meant to outlive its starter (`scripts/serve-lab up`) sets it. The kernel sends
    the signal when the *thread* that forked exits: every caller spawns from its main thread. It
    holds from setpriv's prctl on, an instant after the fork: a caller killed inside that instant
    leaves the server running."""
    command = list(argv) if outlive_caller else ["setpriv", "--pdeathsig", "TERM", "--", *argv]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[2])


def group_members(pgid: int) -> list[int]:
    """The live (non-zombie) processes of a process group."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) and stat[1] == pgid and stat[0] != "Z":
            members.append(int(entry.name))
    return members


def command_of(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except (FileNotFoundError, ProcessLookupError):
        return []


def stop_group(pgid: int, timeout: float = 15) -> None:
    """SIGTERM the group, SIGKILL what is left after `timeout`, return once none is alive."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        if not group_members(pgid):
            return
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
    if members := group_members(pgid):
        raise RuntimeError(f"process group {pgid} survived SIGKILL: {members}")


def http_ok(url: str, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def wait_ready(
    url: str, timeout: float, what: str, proc: subprocess.Popen[bytes] | None = None, log: Path | None = None
) -> None:
    """Poll `url` until it answers 200; raise, with the log's tail, on timeout or when `proc` exits."""
    deadline = time.monotonic() + timeout
    while not http_ok(url):
        if proc is not None and proc.poll() is not None:
            raise ServerError(f"{what} exited with status {proc.returncode} before {url} answered", log)
        if time.monotonic() > deadline:
            raise ServerError(f"{what} did not answer 200 on {url} within {timeout:g} s", log)
        time.sleep(0.1)


def wait_for(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.5) -> None:
    """Poll `check` until it is true; the error says what was awaited."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


# Error lines of the servers started here: glog (Triton "E1203 ..."), logfmt (Prometheus, Alertmanager).
_ERROR_LINE = re.compile(r"^E\d{4} |level=error|^error:", re.IGNORECASE)


def log_excerpt(log: Path | None, errors: int = 10, tail: int = 15) -> str:
    """The log's error lines, then its last lines: a server's reason is often above its shutdown chatter."""
    if log is None or not log.exists():
        return ""
    lines = log.read_text(errors="replace").splitlines()
    found = [line for line in lines[:-tail] if _ERROR_LINE.search(line)][-errors:]
    return "\n".join([*found, *(["..."] if found else []), *lines[-tail:]])


class ServerError(RuntimeError):
    """A local server failed to start; the message ends with the tail of its log."""

    def __init__(self, message: str, log: Path | None = None) -> None:
        excerpt = log_excerpt(log)
        super().__init__(f"{message}\n--- {log} (errors, last lines) ---\n{excerpt}" if excerpt else message)


class ServerProcess:
    """One server this code starts and always stops: `with Server(...) as server:`.

    Subclasses set `name` and `log` and implement `start()` (choose ports, then `_launch`).
    Entering starts the server unless it runs already; leaving stops its process group.
    `outlive_caller`: see spawn()."""

    name = "server"

    def __init__(self, log: Path) -> None:
        self.log = log
        self.outlive_caller = False
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 60) -> None:
        raise NotImplementedError

    def _launch(self, argv: Sequence[str], env: Mapping[str, str], ready_url: str, timeout: float) -> None:
        """Spawn `argv` and wait until `ready_url` answers 200; stopped again when it does not."""
        self.stop()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._proc = spawn(argv, self.log, env, outlive_caller=self.outlive_caller)
        try:
            wait_ready(ready_url, timeout, self.name, self._proc, self.log)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        stop_group(proc.pid)
        proc.wait()

    def __enter__(self) -> Self:
        if not self.running:
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
