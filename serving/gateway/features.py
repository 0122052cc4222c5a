"""Drift features: the few named floats one request becomes (mapping `drift_features`), and
the bounded per-model buffer of sampled rows that the drift agent drains."""

from __future__ import annotations

import random
from collections import deque

import numpy as np

from serving.gateway.mapping import ModelMapping


def features(mapping: ModelMapping, values: dict[str, np.ndarray]) -> list[float]:
    """One row, in the order of mapping.feature_names."""
    row: list[float] = []
    for feature in mapping.drift_features:
        array = values[feature.input]
        if feature.kind == "elements":
            row += array.ravel().astype(np.float64).tolist()
            continue
        channels = np.moveaxis(array, feature.channel_axis, -1).reshape(-1, array.shape[feature.channel_axis])
        stat = channels.mean(axis=0) if feature.kind == "channel_mean" else channels.std(axis=0)
        row += stat.astype(np.float64).tolist()
    return row


class SampleBuffer:
    """Rows sampled at `rate`, the newest `size` kept: a full buffer drops its oldest row."""

    def __init__(self, names: list[str], size: int, rate: float, rng: random.Random | None = None) -> None:
        self.names = names
        self.rate = rate
        self.rows: deque[list[float]] = deque(maxlen=size)
        self._rng = rng or random.Random()

    def sampled(self) -> bool:
        """Whether this request goes into the buffer (probability `rate`)."""
        return self.rate >= 1 or self._rng.random() < self.rate

    def add(self, row: list[float]) -> bool:
        """Keep the row; True when it displaced the oldest one."""
        full = len(self.rows) == self.rows.maxlen
        self.rows.append(row)
        return full

    def drain(self, limit: int) -> list[list[float]]:
        """Up to `limit` rows, oldest first, removed from the buffer."""
        return [self.rows.popleft() for _ in range(min(limit, len(self.rows)))]
