"""A stand-in for the Kubernetes API server, which no test here can reach.

`FakeCoreV1` has the one method the pod source calls, `list_pod_for_all_namespaces`, with the
client's raw-response contract (`_preload_content=False`): a list answers a response whose
`.data` is a PodList's JSON; a watch answers a streaming response whose `.stream()` yields the
chunks the test sends (newline-delimited watch events, split anywhere), until the test ends
it or the source closes it. Errors are the client's own: `ApiException(status=410)` for Gone.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes.client.exceptions import ApiException

_END = b""


def pod(uid: str, name: str, version: int, labels: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "uid": uid,
            "name": name,
            "namespace": "ml",
            "resourceVersion": str(version),
            "labels": labels or {},
            **meta,
        },
        "spec": {"nodeName": "node-a"},
        "status": {"phase": "Running"},
    }


class ListResponse:
    def __init__(self, body: dict[str, Any]) -> None:
        self.status = 200
        self.data = json.dumps(body).encode()


class WatchResponse:
    """A chunked HTTP response held open until `end()` (the server's timeout) or `close()`."""

    def __init__(self) -> None:
        self.status = 200
        self._chunks: queue.Queue[bytes | Exception] = queue.Queue()
        self.closed = threading.Event()

    def send(self, *events: dict[str, Any], split: bool = False) -> None:
        data = b"".join(json.dumps(event).encode() + b"\n" for event in events)
        if split:  # a line cut across two chunks, as TCP may deliver it
            self._chunks.put(data[: len(data) // 2])
            self._chunks.put(data[len(data) // 2 :])
        else:
            self._chunks.put(data)

    def end(self) -> None:
        self._chunks.put(_END)

    def fail(self, error: Exception) -> None:
        self._chunks.put(error)

    def stream(self, amt: int | None = None, decode_content: bool = False) -> Iterator[bytes]:
        while not self.closed.is_set():
            chunk = self._chunks.get()
            if isinstance(chunk, Exception):
                raise chunk
            if chunk == _END:
                return
            yield chunk

    def close(self) -> None:
        self.closed.set()
        self._chunks.put(_END)

    def release_conn(self) -> None:
        return


class FakeCoreV1:
    def __init__(self, pods: list[dict[str, Any]] | None = None, version: int = 100) -> None:
        self.pods = {p["metadata"]["uid"]: p for p in pods or []}
        self.version = version
        self.calls: list[tuple[float, dict[str, Any]]] = []
        self.failures: list[Exception] = []  # raised by the next calls, in order
        self.watches: queue.Queue[WatchResponse] = queue.Queue()

    def list_pod_for_all_namespaces(self, **kwargs: Any) -> ListResponse | WatchResponse:
        self.calls.append((time.monotonic(), kwargs))
        if self.failures:
            raise self.failures.pop(0)
        if kwargs.get("watch"):
            response = WatchResponse()
            self.watches.put(response)
            return response
        return ListResponse(
            {"kind": "PodList", "metadata": {"resourceVersion": str(self.version)}, "items": list(self.pods.values())}
        )

    def next_watch(self, timeout: float = 5.0) -> WatchResponse:
        return self.watches.get(timeout=timeout)

    def kinds(self) -> list[str]:
        """'list' or 'watch@<resourceVersion>' per call so far."""
        return [f"watch@{kw['resource_version']}" if kw.get("watch") else "list" for _, kw in self.calls]


def gone() -> ApiException:
    return ApiException(status=410, reason="Gone: too old resource version")


def wait_until(condition: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.005)
