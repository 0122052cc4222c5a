"""The Kubernetes API behind `PodSource`: the pods of one node, kept current by a watch.

A background thread lists the node's pods (fieldSelector spec.nodeName=NODE_NAME), then
watches from the list's resourceVersion with allowWatchBookmarks, resuming from the last
resourceVersion it saw (an event's or a bookmark's) whenever the server ends a watch. 410 Gone
(the version is too old) means list again. Any other failure: wait, doubling from
`backoff_seconds` up to `max_backoff_seconds`, then resume. The agent reads the answer the
thread keeps; an added or changed pod also wakes the agent (`on_change`), so a new pod whose
cgroup is already there gets its limits without waiting for the next scan.

List and watch use the client's raw responses (`_preload_content=False`) and read the JSON
themselves: no model objects per pod, and the watch's ERROR events are ours to handle.
RBAC it needs: list/watch on pods (core API group).
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from cgroup_limiter.metrics import Metrics
from cgroup_limiter.pods import PodInfo, PodSourceError, index_pods, pod_from_manifest

log = logging.getLogger(__name__)
GONE = 410


def core_v1_api() -> Any:
    """In-cluster credentials (the DaemonSet's service account), else the local kubeconfig."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            config.load_kube_config()
        except (config.ConfigException, OSError) as error:
            raise PodSourceError(f"no Kubernetes credentials (in-cluster or kubeconfig): {error}") from None
    return client.CoreV1Api()


class Gone(Exception):
    """The resourceVersion is too old to watch from (HTTP 410, or an ERROR event with code 410)."""


def _status(error: BaseException) -> int | None:
    """The HTTP status of the client's ApiException (None for socket and urllib3 errors)."""
    status = getattr(error, "status", None)
    return status if isinstance(status, int) else None


def _lines(response: Any) -> Iterator[str]:
    """The watch's newline-delimited JSON, as the chunks arrive."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk if isinstance(chunk, bytes) else chunk.encode()
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if line.strip():
                yield line.decode()
    if buffer.strip():
        yield buffer.decode()


class KubernetesPodSource:
    def __init__(
        self,
        node_name: str,
        api: Any = None,
        metrics: Metrics | None = None,
        backoff_seconds: float = 1.0,
        max_backoff_seconds: float = 30.0,
        watch_timeout_seconds: int = 300,
    ) -> None:
        if not node_name:
            raise PodSourceError("NODE_NAME is empty: set it from the downward API (spec.nodeName)")
        self.node_name = node_name
        self.api = api if api is not None else core_v1_api()
        self.metrics = metrics or Metrics()
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.watch_timeout_seconds = watch_timeout_seconds
        self.files: tuple[Path, ...] = ()  # no local file announces pods
        self.resource_version: str | None = None
        self._objects: dict[str, PodInfo] = {}  # namespace/name -> pod
        self._answer: Mapping[str, PodInfo] | None = None  # replaced whole, never mutated: no lock for readers
        self._error = "no pod list yet"
        self._stop = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None
        self._on_change: Callable[[], None] = lambda: None

    # -- what the agent calls ------------------------------------------------------------
    def pods(self) -> Mapping[str, PodInfo]:
        answer = self._answer
        if answer is None:
            raise PodSourceError(f"pods of node {self.node_name}: {self._error}")
        return answer

    def start(self, on_change: Callable[[], None]) -> None:
        self._on_change = on_change
        self._thread = threading.Thread(target=self.run, name="pod-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:  # unblock the thread's read: shut the socket (a TLS read ignores close)
            sock = getattr(getattr(response, "connection", None), "sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            response.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- the thread --------------------------------------------------------------------
    def run(self) -> None:
        delay = self.backoff_seconds
        while not self._stop.is_set():
            stage = "list"
            try:
                if self.resource_version is None:
                    self._list()
                stage = "watch"
                if self._watch():
                    delay = self.backoff_seconds  # it delivered: the next failure starts the backoff over
                else:  # ended at once with nothing, not even a bookmark: do not spin
                    self._stop.wait(delay)
                    delay = min(delay * 2, self.max_backoff_seconds)
            except Gone as error:
                self.metrics.pod_source_errors.labels("gone").inc()
                log.warning("pod watch: %s; listing again", error)
                self.resource_version = None
                continue
            except Exception as error:  # the client raises ApiException, urllib3 and socket errors alike
                if self._stop.is_set():
                    break
                self.metrics.pod_source_errors.labels(stage).inc()
                self._error = f"{stage} failed: {error}"
                log.warning("pod %s of node %s failed: %s; retrying in %.1fs", stage, self.node_name, error, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, self.max_backoff_seconds)

    def _list(self) -> None:
        selector = f"spec.nodeName={self.node_name}"
        try:
            response = self.api.list_pod_for_all_namespaces(
                field_selector=selector, _preload_content=False, _request_timeout=30
            )
        except Exception as error:
            if _status(error) == GONE:
                raise Gone(str(error)) from error
            raise
        body = json.loads(response.data)
        objects = {}
        for index, item in enumerate(body.get("items") or []):
            pod = pod_from_manifest(item, f"list items[{index}]")
            key = f"{pod.namespace}/{pod.name}"
            known = self._objects.get(key)
            objects[key] = known if known == pod else pod  # unchanged pods keep their object
        changed = objects != self._objects
        self._objects = objects
        self.resource_version = str(body["metadata"]["resourceVersion"])
        log.info("pods of node %s: %d listed, resourceVersion %s", self.node_name, len(objects), self.resource_version)
        self._publish(changed)

    def _watch(self) -> bool:
        """One watch request, until the server ends it; True when it delivered any event."""
        try:
            response = self.api.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={self.node_name}",
                watch=True,
                allow_watch_bookmarks=True,
                resource_version=self.resource_version,
                timeout_seconds=self.watch_timeout_seconds,
                _preload_content=False,
                _request_timeout=(10, self.watch_timeout_seconds + 30),
            )
        except Exception as error:
            if _status(error) == GONE:
                raise Gone(str(error)) from error
            raise
        self._response = response
        delivered = False
        try:
            for line in _lines(response):
                if self._stop.is_set():
                    break
                self._event(json.loads(line))
                delivered = True
        finally:
            self._response = None
            response.close()
            response.release_conn()
        return delivered

    def _event(self, event: Mapping[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            code, message = obj.get("code"), obj.get("message", "")
            if code == GONE:
                raise Gone(message)
            raise PodSourceError(f"watch ERROR {code}: {obj.get('reason', '')} {message}".strip())
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = str(version)
        if kind == "BOOKMARK":
            return
        pod = pod_from_manifest(obj, f"watch {kind} event")
        key = f"{pod.namespace}/{pod.name}"
        if kind == "DELETED":
            if self._objects.pop(key, None) is not None:
                self._publish(changed=False)
        elif self._objects.get(key) != pod:  # ADDED, MODIFIED; a status update changes nothing we read
            self._objects[key] = pod
            self._publish(changed=True)

    def _publish(self, changed: bool) -> None:
        self._answer = index_pods(list(self._objects.values()))
        if changed:
            self._on_change()
