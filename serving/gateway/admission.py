"""The gateway's own bound: at most `concurrency` requests at Triton at once and `queue` more
waiting for a slot; a request beyond both is refused at once (429), not queued without end."""

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
        self.admitted = 0  # holding a slot or waiting for one
        self._slots = asyncio.Semaphore(concurrency)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self.admitted >= self.limit:
            raise OverloadedError(f"{self.admitted} requests in flight or queued (limit {self.limit})")
        self.admitted += 1
        try:
            async with self._slots:
                yield
        finally:
            self.admitted -= 1
