"""Pod metadata behind one narrow interface: `PodSource.pods()` -> {cgroup UID: PodInfo}.

The Kubernetes API adapter (a watch) lives in kube_source.py; `FilePodSource` reads a PodList
JSON (`kubectl get pods -o json` shape), so the agent and its tests run without an API server;
the agent watches that file with inotify and the source parses it again when it changed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

# Static pods run in a cgroup named after their config hash, which the API's mirror pod
# carries in this annotation (its own UID differs).
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


class PodSourceError(RuntimeError):
    """The source could not answer; the agent keeps the last answer and counts the error."""


@dataclass(frozen=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]


class PodSource(Protocol):
    files: tuple[Path, ...]  # local files whose rewrite announces pods (the agent watches them)

    def pods(self) -> Mapping[str, PodInfo]:
        """The node's pods keyed by the UID their cgroup is named after; raises PodSourceError."""
        ...

    def start(self, on_change: Callable[[], None]) -> None:
        """Begin keeping the answer current; call on_change when a pod is added or changed."""
        ...

    def stop(self) -> None: ...


def index_pods(pods: list[PodInfo]) -> dict[str, PodInfo]:
    by_uid: dict[str, PodInfo] = {}
    for pod in pods:
        by_uid[pod.uid] = pod
        mirror = pod.annotations.get(MIRROR_ANNOTATION)
        if mirror:
            by_uid[mirror] = pod
    return by_uid


def pod_from_manifest(item: Any, where: str) -> PodInfo:
    """A Pod object as JSON (metadata.uid/namespace/name/labels/annotations)."""
    metadata = item.get("metadata") if isinstance(item, Mapping) else None
    if not isinstance(metadata, Mapping):
        raise PodSourceError(f"{where}: no metadata mapping")
    for key in ("uid", "name"):
        if not isinstance(metadata.get(key), str) or not metadata[key]:
            raise PodSourceError(f"{where}: metadata.{key} is missing")
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    if not isinstance(labels, Mapping) or not isinstance(annotations, Mapping):
        raise PodSourceError(f"{where}: metadata.labels and metadata.annotations must be mappings")
    return PodInfo(
        uid=metadata["uid"],
        namespace=str(metadata.get("namespace") or "default"),
        name=metadata["name"],
        labels={str(k): str(v) for k, v in labels.items()},
        annotations={str(k): str(v) for k, v in annotations.items()},
    )


class FilePodSource:
    """A PodList JSON file, parsed again when its content changes; only pods of `node_name` if given."""

    def __init__(self, path: Path, node_name: str | None = None) -> None:
        self.path = path
        self.files = (path,)
        self.node_name = node_name
        self._text: bytes | None = None
        self._pods: dict[str, PodInfo] = {}

    def pods(self) -> Mapping[str, PodInfo]:
        try:
            text = self.path.read_bytes()
            if text == self._text:
                return self._pods
            data = json.loads(text)
        except OSError as error:
            raise PodSourceError(f"{self.path}: cannot read: {error.strerror}") from None
        except json.JSONDecodeError as error:
            raise PodSourceError(f"{self.path}: line {error.lineno}: not valid JSON: {error.msg}") from None
        items = data.get("items") if isinstance(data, Mapping) else None
        if not isinstance(items, list):
            raise PodSourceError(f"{self.path}: expected a PodList with an 'items' list")
        pods = []
        for index, item in enumerate(items):
            node = (item.get("spec") or {}).get("nodeName") if isinstance(item, Mapping) else None
            if self.node_name and node and node != self.node_name:
                continue
            pods.append(pod_from_manifest(item, f"{self.path}: items[{index}]"))
        self._pods = index_pods(pods)
        self._text = text
        log.info("pods file %s: %d pod(s)", self.path, len(pods))
        return self._pods

    def start(self, on_change: Callable[[], None]) -> None:
        """Nothing runs in the background: the agent watches the file and calls pods() again."""

    def stop(self) -> None:
        """Nothing to stop."""
