"""The lab harness's reading of ansible-playbook runs (issue 18).

A host whose sshd accepts the connection but does not answer in time (a TCG guest starved
of CPU does exactly that) is reported by the json callback as `unreachable`, with no task
marked `failed`. These tests run the real ansible-playbook with the project's ansible.cfg
(Mitogen) against such a host, a loopback listener that never speaks SSH, and check that the
harness names what happened instead of calling the run a success.
"""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab_fleet.ansible_env import ansible_env
from tests.lab.play_report import PlayReport

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def silent_sshd() -> Iterator[int]:
    """A loopback port that accepts TCP connections and never sends an SSH banner."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


def _run(tmp_path: Path, port: int, *extra: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "hosts.yml").write_text(
        "all:\n  hosts:\n    stalled-node:\n"
        f"      ansible_host: 127.0.0.1\n      ansible_port: {port}\n      ansible_user: root\n"
        "      ansible_ssh_timeout: 3\n"
        "      ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null\n"
    )
    (tmp_path / "play.yml").write_text(
        "- name: Reach the node\n  hosts: all\n  gather_facts: false\n"
        "  tasks:\n    - name: Ping\n      ansible.builtin.ping:\n"
    )
    return subprocess.run(
        ["ansible-playbook", "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"), *extra],
        cwd=REPO,
        env=ansible_env(tmp_path / "facts", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("strategy", ["mitogen_linear", "linear"])
def test_an_unanswering_host_is_unreachable_not_a_success(tmp_path: Path, silent_sshd: int, strategy: str) -> None:
    result = _run(tmp_path, silent_sshd, "-e", f"ansible_strategy={strategy}")
    report = PlayReport.parse(result)
    # The trap: no task is marked failed, so "no failed task" read this run as a success.
    assert not report.failed
    assert result.returncode == 4, result.stderr[-2000:]
    assert not report.succeeded
    verdict = report.verdict()
    assert verdict.startswith("stalled-node unreachable at 'Ping' (rc 4): "), verdict


def test_a_run_cut_short_is_not_a_success() -> None:
    killed = subprocess.CompletedProcess(["ansible-playbook"], -9, stdout='{"plays": [', stderr="Killed")
    assert PlayReport.parse(killed).verdict().startswith("did not finish (rc -9): no JSON report on stdout")
    empty = subprocess.CompletedProcess(["ansible-playbook"], 0, stdout='{"plays": [], "stats": {}}', stderr="")
    report = PlayReport.parse(empty)
    assert not report.succeeded
    assert "no play recap" in report.verdict()


def test_a_failed_task_is_named_with_its_message() -> None:
    stdout = (
        '{"plays": [{"tasks": [{"task": {"name": "preflight : Stop"}, "hosts": {"n1": '
        '{"failed": true, "msg": ["preflight found 1 problem(s) on n1:", "gpu_fleet_gpu_count:  bad"]}}}]}],'
        ' "stats": {"n1": {"failures": 1, "unreachable": 0, "changed": 0}}}'
    )
    report = PlayReport.parse(subprocess.CompletedProcess(["ansible-playbook"], 2, stdout=stdout, stderr=""))
    assert report.verdict() == (
        "failed at 'preflight : Stop' on n1 (rc 2): preflight found 1 problem(s) on n1: gpu_fleet_gpu_count: bad"
    )
