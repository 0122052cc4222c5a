"""Triton as the gateway reaches it: a small pool of async gRPC clients (one HTTP/2 channel
each, used round-robin) and the readiness probe.

The probe is a background task: every `period` seconds it asks Triton whether the server and
each mapped model are ready, each call bounded by the period, and keeps the answer; /readyz
and every request read that cached answer. An inference that finds Triton unreachable marks it
not ready at once, before the next probe.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable

from tritonclient.grpc.aio import InferenceServerClient
from tritonclient.utils import InferenceServerException

log = logging.getLogger("serving.gateway")


class TritonPool:
    def __init__(self, url: str, channels: int) -> None:
        self.url = url
        self.clients = [InferenceServerClient(url) for _ in range(max(channels, 1))]
        self._next = itertools.cycle(self.clients)

    def client(self) -> InferenceServerClient:
        return next(self._next)

    async def close(self) -> None:
        await asyncio.gather(*(client.close() for client in self.clients))


class Readiness:
    def __init__(self, pool: TritonPool, models: list[str], period: float, on_change: Callable[[bool], None]) -> None:
        self.pool = pool
        self.models = models
        self.period = period
        self.ready = False
        self.models_ready: dict[str, bool] = dict.fromkeys(models, False)
        self.checked_at = 0.0
        self.reason = "not probed yet"
        self._on_change = on_change

    def _set(self, ready: bool, reason: str) -> None:
        if ready != self.ready:
            log.warning("Triton %s: %s", "ready" if ready else "not ready", reason or "every model ready")
            self._on_change(ready)
        self.ready, self.reason = ready, reason

    def unreachable(self, reason: str) -> None:
        """An inference found Triton gone: not ready until the probe finds it again."""
        self.models_ready = dict.fromkeys(self.models, False)
        self._set(False, reason)

    async def check(self) -> bool:
        client = self.pool.client()
        try:
            server = await client.is_server_ready(client_timeout=self.period)
            models = [await client.is_model_ready(model, client_timeout=self.period) for model in self.models]
        except InferenceServerException as err:
            self.unreachable(f"{self.pool.url}: {err.status() or ''} {err.message()}".strip())
        else:
            self.models_ready = dict(zip(self.models, models, strict=True))
            not_ready = [model for model, ready in self.models_ready.items() if not ready]
            reason = "server not ready" if not server else f"models not ready: {not_ready}" if not_ready else ""
            self._set(server and not not_ready, reason)
        self.checked_at = time.time()
        return self.ready

    async def run(self) -> None:
        """Probe every `period` seconds until cancelled."""
        while True:
            started = time.monotonic()
            await self.check()
            await asyncio.sleep(max(self.period - (time.monotonic() - started), 0))
