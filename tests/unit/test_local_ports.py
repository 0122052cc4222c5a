"""free_port() (model_repo_check/tritonserver/processes.py): a loopback port a server can bind, never one of
the kernel's ephemeral range, where outgoing connections take their source ports."""

from __future__ import annotations

import socket
from pathlib import Path

from model_repo_check.tritonserver.processes import LOOPBACK, free_port


def test_a_free_port_binds_on_loopback_and_lies_outside_the_ephemeral_range() -> None:
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    for _ in range(20):
        port = free_port()
        assert not low <= port <= high, (port, low, high)
        with socket.socket() as sock:
            sock.bind((LOOPBACK, port))
