"""The live window of one model: the newest sampled rows, at most `size`, with the reference's
feature names. Rows whose names or width differ from the reference are refused, naming both."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence


class FeatureMismatchError(ValueError):
    pass


class LiveWindow:
    def __init__(self, model: str, names: Sequence[str], size: int) -> None:
        self.model = model
        self.names = tuple(names)
        self.rows: deque[tuple[float, ...]] = deque(maxlen=size)
        self.added = 0  # rows taken in since the start; an evaluation notes the count it saw

    def __len__(self) -> int:
        return len(self.rows)

    def extend(self, names: Sequence[str], rows: Sequence[Sequence[float]]) -> None:
        """Append rows (oldest first); the oldest rows leave a full window. All or nothing."""
        if tuple(names) != self.names:
            missing = [name for name in self.names if name not in names]
            extra = [name for name in names if name not in self.names]
            detail = f"missing {missing}, unknown {extra}" if missing or extra else "same names, another order"
            raise FeatureMismatchError(
                f"{self.model}: the gateway's drift features differ from the reference's ({detail})"
            )
        checked = []
        for index, row in enumerate(rows):
            if len(row) != len(self.names):
                raise FeatureMismatchError(
                    f"{self.model}: sample row {index} has {len(row)} values, the features are {len(self.names)}"
                )
            values = tuple(float(value) for value in row)
            if not all(math.isfinite(value) for value in values):
                raise FeatureMismatchError(f"{self.model}: sample row {index} has a value that is not finite")
            checked.append(values)
        self.rows.extend(checked)
        self.added += len(checked)
