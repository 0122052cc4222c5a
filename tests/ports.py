"""A loopback port held by another listener, for tests of what happens when a chosen port is taken."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from model_repo_check.tritonserver.processes import LOOPBACK


@contextmanager
def taken_port() -> Iterator[int]:
    """A loopback port that a socket listens on until the block ends."""
    with socket.socket() as taken:
        taken.bind((LOOPBACK, 0))
        taken.listen()
        yield taken.getsockname()[1]
