"""tests/gates.py, run for real on a scratch project: gates are make targets of its own Makefile."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SLEEPER = """\
import sys, time
try:
    open(sys.argv[1] + ".started", "w").close()
    time.sleep(120)
except KeyboardInterrupt:
    open(sys.argv[1] + ".stopped", "w").write("teardown ran")
    sys.exit(3)
"""

SAMPLE_TESTS = """\
import pytest

def test_passes():
    pass

def test_fails():
    assert False

def test_skips():
    pytest.skip("promtool is not installed")
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "tests").mkdir()
    shutil.copy(REPO / "tests/gates.py", tmp_path / "tests/gates.py")
    (tmp_path / "tests/__init__.py").touch()
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    (tmp_path / "sample_test.py").write_text(SAMPLE_TESTS)
    python = sys.executable
    (tmp_path / "Makefile").write_text(
        f"fast:\n\t@echo fast ok\n"
        f"sample:\n\t{python} -m pytest -q -p no:cacheprovider sample_test.py\n"
        f"slow:\n\t@{python} sleeper.py slow\n"
        f"lane:\n\t@{python} sleeper.py lane\n"
        f"niceness:\n\t@{python} -c 'import os; print(\"niceness\", os.nice(0))'\n"
        f'niceness-beside:\n\t@{python} -c \'import os; open("beside.nice", "w").write(str(os.nice(0)))\'\n'
    )
    return tmp_path


def _as_a_background_job() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a shell without job control does to `cmd &`


def gates(project: Path, *args: str) -> subprocess.Popen[str]:
    """The runner as CI may start it: in the background, with SIGINT ignored."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.gates", "run", *args],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_as_a_background_job,
    )


def test_the_summary_gives_each_gate_its_outcomes_and_every_skip_its_reason(project: Path) -> None:
    out, _ = gates(project, "fast", "sample").communicate(timeout=120)
    summary = (project / "reports/summary.txt").read_text()
    rows = {line.split()[0]: line.split()[1:] for line in summary.splitlines() if line[:1].isalpha()}
    assert rows["fast"][1:] == ["0", "0", "0", "0"], summary
    assert rows["sample"][1:] == ["2", "1", "1", "1"], summary  # make's exit 2: pytest failed
    assert "sample_test::test_skips: promtool is not installed" in summary
    assert (project / "reports/junit/sample.xml").exists() and (project / "reports/logs/sample.log").exists()
    assert "failed gates: sample" in out


def test_sigterm_stops_both_lanes_through_their_teardown_and_still_prints_the_summary(project: Path) -> None:
    process = gates(project, "fast", "slow", "--beside", "lane")
    deadline = time.monotonic() + 60
    while not all((project / f"{lane}.started").exists() for lane in ("slow", "lane")):
        assert time.monotonic() < deadline, "the sleepers never started"
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)  # to the runner alone, as `kill` would
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 130, out
    assert (project / "slow.stopped").exists() and (project / "lane.stopped").exists(), out
    assert "where the time went" in out and "interrupted: the running gates were stopped" in out
    rows = [line.split()[:3] for line in out.splitlines() if re.match(r"(fast|slow|lane) +\d+:\d\d ", line)]
    # An interrupted make exits -2 (killed by the SIGINT) or 2 (its recipe's exit reached it first).
    exits = {"fast": ("0",), "slow": ("-2", "2"), "lane": ("-2", "2")}
    assert [gate for gate, _, _ in rows] == list(exits) and all(rc in exits[gate] for gate, _, rc in rows), out


def test_the_second_lane_runs_at_a_lower_cpu_priority_than_the_first(project: Path) -> None:
    out, _ = gates(project, "niceness", "--beside", "niceness-beside").communicate(timeout=120)
    base = os.nice(0)
    assert f"niceness {base}" in out, out
    assert int((project / "beside.nice").read_text()) == min(base + 10, 19), out
