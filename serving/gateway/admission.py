"""The gateway's own bound: at most `concurrency` requests at Triton at once and `queue` more
admitted and waiting; a request beyond both is refused at once (429), before its body is read or
parsed, not queued without end.

`admitted()` is taken first (the 429 decision); the body is read and checked inside it; `turn()`
then waits for one of the `concurrency` call slots.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class OverloadedError(Exception):
    pass


class Admission:
    def __init__(self, concurrency: int, queue: int) -> None:
        if concurrency < 1 or queue < 0:
            raise ValueError(f"concurrency must be >= 1 and queue >= 0, got {concurrency} and {queue}")
        self.limit = concurrency + queue
        self.admitted_count = 0  # holding a call slot or waiting for one
        self._slots = asyncio.Semaphore(concurrency)

    @asynccontextmanager
    async def admitted(self) -> AsyncIterator[None]:
        if self.admitted_count >= self.limit:
            raise OverloadedError(f"{self.admitted_count} requests in flight or queued (limit {self.limit})")
        self.admitted_count += 1
        try:
            yield
        finally:
            self.admitted_count -= 1

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        async with self._slots:
            yield
