"""Run `make test`'s gates one after another and say where the time went.

    python3 -m tests.gates run GATE [GATE ...] [--beside GATE]   each GATE is a make target; all run,
                                                               failures included
    python3 -m tests.gates summary                             the table of the last run, from reports/

Each gate runs as `make GATE`, its output shown and kept in reports/logs/GATE.log. A `--beside` gate
runs in a second lane at nice 10, next to the others, once the first gate (the environments) has
finished; its output goes to its log, whose tail is shown at the end when it fails. A SIGTERM (a CI timeout) or
Ctrl-C is passed on to the running gates' process groups as SIGINT, so their fixtures stop what they
started and pytest still writes its report, and the summary of what ran is printed. pytest inside a gate
writes reports/junit/GATE.xml (through PYTEST_ADDOPTS), which holds every test's outcome, duration
and skip reason. The summary is one screen: each gate's wall time and exit status, passed, failed
and skipped tests, every skip with its reason, and the slowest tests. Standard library only: it
runs before any virtual environment exists and times their build too.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

REPO = Path(__file__).resolve().parents[1]
REPORTS = REPO / "reports"
SLOWEST = 12
STOP_TIMEOUT_S = 180  # a gate's teardown after an interrupt: VMs powered off, servers stopped
BESIDE_NICENESS = 10  # the second lane's CPU priority (BesideGate)


@dataclass
class GateResult:
    gate: str
    wall_s: float
    rc: int
    outcomes: Counter[str] = field(default_factory=Counter)
    skips: list[tuple[str, str]] = field(default_factory=list)  # (test id, reason)
    durations: list[tuple[float, str]] = field(default_factory=list)  # (seconds, test id)


def _junit_paths(gate: str) -> list[Path]:
    return sorted((REPORTS / "junit").glob(f"{gate}*.xml"))


def _read_junit(result: GateResult) -> None:
    for path in _junit_paths(result.gate):
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError as error:
            result.skips.append((str(path), f"unreadable JUnit report: {error}"))
            continue
        for case in root.iter("testcase"):
            test_id = f"{case.get('classname', '')}::{case.get('name', '')}".lstrip(":")
            result.durations.append((float(case.get("time") or 0), test_id))
            children = {child.tag for child in case}
            if "skipped" in children:
                skipped = case.find("skipped")
                reason = (skipped.get("message") or skipped.text or "").strip() if skipped is not None else ""
                result.outcomes["skipped"] += 1
                result.skips.append((test_id, reason.removeprefix("Skipped: ")))
            elif children & {"failure", "error"}:
                result.outcomes["failed"] += 1
            else:
                result.outcomes["passed"] += 1


def _record(result: GateResult) -> None:
    path = REPORTS / "gates" / f"{result.gate}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"gate": result.gate, "wall_s": round(result.wall_s, 1), "rc": result.rc}))


def _start(gate: str, stdout: int | TextIO, niceness: int = 0) -> subprocess.Popen[str]:
    """`make GATE` at `niceness`, with pytest told to write the gate's JUnit report."""
    for stale in _junit_paths(gate):
        stale.unlink()
    junit = REPORTS / "junit" / f"{gate}.xml"
    addopts = " ".join(
        filter(None, [os.environ.get("PYTEST_ADDOPTS", ""), f"--junitxml={shlex.quote(str(junit))}", "--durations=10"])
    )
    env = {**os.environ, "PYTEST_ADDOPTS": addopts}
    return subprocess.Popen(
        [*(["nice", "-n", str(niceness)] if niceness else []), "make", "--no-print-directory", gate],
        cwd=REPO,
        env=env,
        stdout=stdout,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        start_new_session=True,  # its own process group: an interrupt reaches it once, from here
    )


def _interrupt(process: subprocess.Popen[str]) -> int:
    """SIGINT to a gate's process group, then its exit status (SIGKILL after STOP_TIMEOUT_S)."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGINT)
            return process.wait(timeout=STOP_TIMEOUT_S)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
    return process.wait()


def _sigterm_as_interrupt(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one is enough: the gates' teardown must not be cut
    raise KeyboardInterrupt


def _finish(gate: str, started: float, rc: int, ended: float | None = None) -> GateResult:
    result = GateResult(gate=gate, wall_s=(ended or time.monotonic()) - started, rc=rc)
    _record(result)
    print(f"=== gate {gate}: exit {rc} after {result.wall_s:.0f} s", flush=True)
    return result


def run_gate(gate: str) -> GateResult:
    """`make GATE` with its output shown and logged."""
    print(f"\n=== gate {gate}: make {gate}", flush=True)
    started = time.monotonic()
    process: subprocess.Popen[str] | None = None
    with (REPORTS / "logs" / f"{gate}.log").open("w") as log:
        try:  # an interrupt can land anywhere from here on, the start included
            process = _start(gate, subprocess.PIPE)
            assert process.stdout is not None
            for line in process.stdout:
                sys.stdout.write(line)
                log.write(line)
            rc = process.wait()
        except KeyboardInterrupt:
            if process is not None:
                _finish(gate, started, _interrupt(process))
            raise
    return _finish(gate, started, rc)


class BesideGate:
    """A gate in the second lane: `make GATE` in the background, its output in its log only, at
    BESIDE_NICENESS: the first lane's proofs measure time (latency ratios, probe periods), the
    second lane's VMs are throughput work with timeouts in minutes, so the CPU goes to the first
    lane when both want it (neither lane waits for the other, so no work is lost)."""

    def __init__(self, gate: str) -> None:
        self.gate = gate
        self.log_path = REPORTS / "logs" / f"{gate}.log"
        self.log = self.log_path.open("w")
        print(f"\n=== gate {gate}: make {gate}, beside the others (log {self.log_path.relative_to(REPO)})", flush=True)
        self.started = time.monotonic()
        self.process = _start(gate, self.log, BESIDE_NICENESS)
        self.finished_at: float | None = None
        self.ended = threading.Thread(target=self._watch, daemon=True)
        self.ended.start()

    def _watch(self) -> None:
        self.process.wait()
        self.finished_at = time.monotonic()  # its wall time ends with it, not when the first lane looks

    def wait(self) -> GateResult:
        try:
            rc = self.process.wait()
            self.ended.join()
        finally:
            self.log.close()
        if rc != 0:
            tail = self.log_path.read_text(errors="replace").splitlines()[-150:]
            print(f"\n=== gate {self.gate} failed; the last lines of its log:\n" + "\n".join(tail), flush=True)
        return _finish(self.gate, self.started, rc, self.finished_at)

    def stop(self) -> None:
        _finish(self.gate, self.started, _interrupt(self.process), self.finished_at)
        self.log.close()


def load_results() -> list[GateResult]:
    """The last run's gates in the order they ran, with their JUnit reports read."""
    order = REPORTS / "gates" / "order.json"
    gates = json.loads(order.read_text()) if order.exists() else []
    results = []
    for gate in gates:
        path = REPORTS / "gates" / f"{gate}.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        result = GateResult(gate=gate, wall_s=data["wall_s"], rc=data["rc"])
        _read_junit(result)
        results.append(result)
    return results


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def summary(results: list[GateResult]) -> str:
    lines = ["", "=== make test: where the time went", ""]
    lines.append(f"{'gate':<22} {'wall':>6} {'exit':>4} {'passed':>7} {'failed':>7} {'skipped':>8}")
    for r in results:
        lines.append(
            f"{r.gate:<22} {_minutes(r.wall_s):>6} {r.rc:>4} {r.outcomes['passed']:>7} "
            f"{r.outcomes['failed']:>7} {r.outcomes['skipped']:>8}"
        )
    run = REPORTS / "gates" / "run.json"
    total = json.loads(run.read_text())["elapsed_s"] if run.exists() else sum(r.wall_s for r in results)
    counts = Counter[str]()
    for r in results:
        counts.update(r.outcomes)
    lines.append(
        f"{'elapsed':<22} {_minutes(total):>6} {next((r.rc for r in results if r.rc), 0):>4} "
        f"{counts['passed']:>7} {counts['failed']:>7} {counts['skipped']:>8}"
    )
    skips = [(r.gate, test, reason) for r in results for test, reason in r.skips]
    if skips:
        lines += ["", "skipped, with the reason:"]
        lines += [f"  [{gate}] {test}: {reason}" for gate, test, reason in skips]
    slowest = sorted(((s, r.gate, t) for r in results for s, t in r.durations), reverse=True)[:SLOWEST]
    if slowest:
        lines += ["", f"slowest {len(slowest)} tests:"]
        lines += [f"  {s:7.1f} s  [{gate}] {test}" for s, gate, test in slowest]
    lines.append(f"\nreports: {REPORTS.relative_to(REPO)}/ (junit/*.xml, logs/*.log, summary.txt)")
    return "\n".join(lines)


def write_summary(results: list[GateResult]) -> str:
    text = summary(results)
    (REPORTS / "summary.txt").write_text(text.lstrip("\n") + "\n")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.gates", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run make targets as gates, then print the summary")
    run.add_argument("gates", nargs="+")
    run.add_argument(
        "--beside", action="append", default=[], help="a gate for the second lane, started after the first gate"
    )
    sub.add_parser("summary", help="print the summary of the last run")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    # Started as a background job (`make test &` in a script), this runner inherits SIGINT ignored, and so
    # would every gate: the interrupt that stops them would do nothing. A handler is reset by exec, so
    # each gate starts with SIGINT's default again.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.command == "summary":
        print(write_summary(load_results()))
        return 0
    for folder in ("gates", "logs", "junit"):
        (REPORTS / folder).mkdir(parents=True, exist_ok=True)
    for old in (REPORTS / "gates").glob("*.json"):
        old.unlink()
    (REPORTS / "gates" / "order.json").write_text(json.dumps([*args.gates, *args.beside]))
    (REPORTS / "gates" / "run.json").unlink(missing_ok=True)
    started = time.monotonic()
    results = []
    beside: list[BesideGate] = []
    try:
        for index, gate in enumerate(args.gates):
            results.append(run_gate(gate))
            if index == 0:
                beside = [BesideGate(name) for name in args.beside]
        results += [lane.wait() for lane in beside]
        elapsed = {"elapsed_s": round(time.monotonic() - started, 1)}
        (REPORTS / "gates" / "run.json").write_text(json.dumps(elapsed))
    except KeyboardInterrupt:
        for lane in beside:
            lane.stop()
        print(write_summary(load_results()), flush=True)
        print("\ninterrupted: the running gates were stopped", file=sys.stderr)
        return 130
    print(write_summary(load_results()), flush=True)
    failed = [r.gate for r in results if r.rc != 0]
    if failed:
        print(f"\nfailed gates: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
