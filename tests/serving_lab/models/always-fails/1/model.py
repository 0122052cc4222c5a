"""Raises on every request: Triton answers each with an error and counts it as a failure."""

from typing import Any


class TritonPythonModel:
    def execute(self, requests: list[Any]) -> list[Any]:
        raise RuntimeError(f"always-fails: refusing {len(requests)} request(s) on purpose")
