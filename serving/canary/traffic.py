"""Load split between two Triton endpoints by weight, as Istio's weighted route splits it.

Each client thread sends one request at a time (gRPC, batch 1, standard-normal embeddings: the
project's unshifted inputs), at most `rate` requests per second over all clients, and picks the
canary with probability weight/100, so the canary's share follows `set_weight` from the next
request on. Sequential requests below saturation keep each server's queue empty: a request's
latency is its service time on that server, whatever the weight, so the two tracks' P95s compare
the models and not the load each got.

`reaches_canary=False` is a canary subset that selects no pod (a broken label, a Service with no
endpoints): the weight is set, but the requests meant for the canary never reach it (counted as
`undelivered`).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from types import TracebackType

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

STABLE, CANARY = "stable", "canary"


class WeightedLoad:
    def __init__(
        self,
        stable_url: str,
        canary_url: str,
        model: str,
        input_name: str,
        features: int,
        clients: int = 1,
        seed: int = 0,
        reaches_canary: bool = True,
        rate: float | None = None,
    ) -> None:
        self.urls = {STABLE: stable_url, CANARY: canary_url}
        self.model, self.input_name, self.features = model, input_name, features
        self.clients, self.seed, self.reaches_canary = clients, seed, reaches_canary
        self.period = clients / rate if rate else 0.0  # seconds between one client's requests
        self.weight = 0
        self.sent: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def set_weight(self, weight: int) -> None:
        if not 0 <= weight <= 100:
            raise ValueError(f"canary weight {weight}: must be 0..100")
        self.weight = weight

    def _client(self, index: int) -> None:
        rng = np.random.default_rng([self.seed, index])
        clients = {track: grpcclient.InferenceServerClient(url) for track, url in self.urls.items()}
        due = time.monotonic()
        try:
            while not self._stop.is_set():
                due += self.period
                if self._stop.wait(max(due - time.monotonic(), 0)):
                    break
                track = CANARY if rng.random() * 100 < self.weight else STABLE
                if track == CANARY and not self.reaches_canary:
                    self._count(self.sent, "undelivered")
                    continue
                tensor = grpcclient.InferInput(self.input_name, [1, self.features], "FP32")
                tensor.set_data_from_numpy(rng.standard_normal((1, self.features)).astype(np.float32))
                try:
                    clients[track].infer(self.model, [tensor])
                    self._count(self.sent, track)
                except InferenceServerException:
                    self._count(self.failed, track)
        finally:
            for client in clients.values():
                client.close()

    def _count(self, counter: Counter[str], key: str) -> None:
        with self._lock:
            counter[key] += 1

    def start(self) -> None:
        self._stop.clear()
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(self.clients)]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self._threads = []

    def __enter__(self) -> WeightedLoad:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
