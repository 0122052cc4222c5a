"""The Kubernetes API behind `PodSource`: the pods of one node (fieldSelector spec.nodeName).

A thin adapter: it lists the node's pods every `resync_seconds`, and at once (at most every
`miss_backoff_seconds`) when the agent meets a cgroup whose UID it does not know yet.
RBAC it needs: get/list/watch on pods (core API group).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from cgroup_limiter.pods import PodInfo, PodSourceError, index_pods


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


class KubernetesPodSource:
    def __init__(
        self,
        node_name: str,
        api: Any = None,
        resync_seconds: float = 30.0,
        miss_backoff_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not node_name:
            raise PodSourceError("NODE_NAME is empty: set it from the downward API (spec.nodeName)")
        self.node_name = node_name
        self.api = api if api is not None else core_v1_api()
        self.resync_seconds = resync_seconds
        self.miss_backoff_seconds = miss_backoff_seconds
        self.clock = clock
        self._listed_at: float | None = None
        self._pods: dict[str, PodInfo] = {}

    def _list(self) -> None:
        try:
            answer = self.api.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={self.node_name}", _request_timeout=10
            )
        except Exception as error:  # the client raises ApiException, urllib3 and socket errors alike
            raise PodSourceError(f"listing pods of node {self.node_name}: {error}") from error
        pods = []
        for item in answer.items:
            meta = item.metadata
            pods.append(
                PodInfo(
                    uid=meta.uid,
                    namespace=meta.namespace or "default",
                    name=meta.name,
                    labels=dict(meta.labels or {}),
                    annotations=dict(meta.annotations or {}),
                )
            )
        self._pods = index_pods(pods)
        self._listed_at = self.clock()

    def pods(self, wanted: Collection[str]) -> Mapping[str, PodInfo]:
        """List when the last list is stale, or when a cgroup appeared whose pod it missed."""
        age = None if self._listed_at is None else self.clock() - self._listed_at
        missing = any(uid not in self._pods for uid in wanted)
        if age is None or age >= self.resync_seconds or (missing and age >= self.miss_backoff_seconds):
            self._list()
        return self._pods
