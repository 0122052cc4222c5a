"""Triton as the gateway reaches it: a small pool of async gRPC clients (one HTTP/2 channel
each, used round-robin) and the readiness probe.

The probe is a background task: every `period` seconds it asks Triton whether the server and
each mapped model are ready, each call bounded by the period, and keeps the answers. `ready` (what
/readyz says, and so whether the pod stays in the Service) is Triton reachable and its server
ready, never a model's state or load: a refused connection makes it false at once, a slow answer
only after `timeouts` slow probes in a row (a Triton busy with a full queue still answers, late).
Each model's own readiness is kept apart (`models_ready`). A request that finds Triton
unreachable wakes the probe at once instead of waiting for the period.
"""

from __future__ import annotations

import asyncio
import contextlib
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
    def __init__(
        self,
        pool: TritonPool,
        models: list[str],
        period: float,
        on_change: Callable[[bool], None],
        on_model: Callable[[str, bool], None],
        timeouts: int = 3,
    ) -> None:
        self.pool = pool
        self.models = models
        self.period = period
        self.timeouts = timeouts
        self.ready = False
        self.models_ready: dict[str, bool] = dict.fromkeys(models, False)
        self.checked_at = 0.0
        self.reason = "not probed yet"
        self.slow_probes = 0
        self._on_change = on_change
        self._on_model = on_model
        self._wake = asyncio.Event()

    def _set(self, ready: bool, reason: str) -> None:
        if ready != self.ready:
            log.warning("Triton %s: %s", "ready" if ready else "not ready", reason or "reachable and ready")
            self._on_change(ready)
        self.ready, self.reason = ready, reason

    def _set_model(self, model: str, ready: bool) -> None:
        if self.models_ready.get(model) != ready:
            log.warning("model %s %s", model, "ready" if ready else "not ready")
        self.models_ready[model] = ready
        self._on_model(model, ready)

    def model_not_ready(self, model: str) -> None:
        """Triton answered that the model has no version loaded: not ready until the probe finds it."""
        self._set_model(model, False)

    def suspect(self) -> None:
        """A request found Triton unreachable: probe now rather than at the next period."""
        self._wake.set()

    async def check(self) -> bool:
        client = self.pool.client()
        try:
            server = await client.is_server_ready(client_timeout=self.period)
            models = [await client.is_model_ready(model, client_timeout=self.period) for model in self.models]
        except InferenceServerException as err:
            status = (err.status() or "").removeprefix("StatusCode.")
            reason = f"{self.pool.url}: {status} {err.message()}".strip()
            self.slow_probes = self.slow_probes + 1 if status == "DEADLINE_EXCEEDED" else self.timeouts
            if self.slow_probes >= self.timeouts:
                for model in self.models:
                    self._set_model(model, False)
                self._set(False, reason)
        else:
            self.slow_probes = 0
            for model, ready in zip(self.models, models, strict=True):
                self._set_model(model, ready)
            self._set(server, "" if server else "server not ready")
        self.checked_at = time.time()
        return self.ready

    async def run(self) -> None:
        """Probe every `period` seconds, or at once when woken (at most ten times a period), until cancelled."""
        while True:
            self._wake.clear()
            started = time.monotonic()
            await self.check()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(self.period - (time.monotonic() - started), 0))
            await asyncio.sleep(max(self.period / 10 - (time.monotonic() - started), 0))
