"""Pod metadata sources: the pods file, and the Kubernetes adapter against a stand-in CoreV1Api
(no API server is reachable in tests; the stand-in answers list_pod_for_all_namespaces only)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from cgroup_limiter.kube_source import KubernetesPodSource
from cgroup_limiter.pods import MIRROR_ANNOTATION, FilePodSource, PodSourceError


def manifest(uid: str, name: str, node: str = "node-a", **meta: object) -> dict:
    return {"metadata": {"uid": uid, "name": name, "namespace": "ml", **meta}, "spec": {"nodeName": node}}


def test_pods_file_keeps_this_nodes_pods_and_indexes_mirror_pods(tmp_path: Path):
    path = tmp_path / "pods.json"
    items = [
        manifest("u1", "train", labels={"team": "a"}),
        manifest("u2", "elsewhere", node="node-b"),
        manifest("u3", "etcd-node-a", annotations={MIRROR_ANNOTATION: "5f1e0c9a8b7d"}),
    ]
    path.write_text(json.dumps({"kind": "PodList", "items": items}))
    pods = FilePodSource(path, "node-a").pods()
    assert set(pods) == {"u1", "u3", "5f1e0c9a8b7d"}
    assert pods["u1"].labels == {"team": "a"}
    assert pods["5f1e0c9a8b7d"].name == "etcd-node-a"


def test_pods_file_is_parsed_again_only_when_it_changes(tmp_path: Path):
    path = tmp_path / "pods.json"
    path.write_text(json.dumps({"items": [manifest("u1", "a")]}))
    source = FilePodSource(path)
    first = source.pods()
    assert source.pods() is first
    path.write_text(json.dumps({"items": [manifest("u1", "a"), manifest("u2", "b")]}))
    assert set(source.pods()) == {"u1", "u2"}


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("[1, 2", "line 1: not valid JSON"),
        ('{"kind": "Pod"}', "expected a PodList"),
        ('{"items": [{"metadata": {"uid": "u"}}]}', r"items\[0\]: metadata.name is missing"),
        ('{"items": [{"metadata": {"uid": "u", "name": "n", "labels": ["a"]}}]}', "must be mappings"),
    ],
)
def test_pods_file_errors_name_the_file(tmp_path: Path, body: str, match: str):
    path = tmp_path / "pods.json"
    path.write_text(body)
    with pytest.raises(PodSourceError, match=match):
        FilePodSource(path).pods()


class CoreV1Stub:
    """Records each list call's arguments and answers like the client (V1PodList-shaped)."""

    def __init__(self, pods: list[dict]) -> None:
        self.pods = pods
        self.calls: list[dict] = []
        self.fail = False

    def list_pod_for_all_namespaces(self, **kwargs: object) -> SimpleNamespace:
        self.calls.append(kwargs)
        if self.fail:
            raise ConnectionError("connection refused")
        items = [
            SimpleNamespace(metadata=SimpleNamespace(**{"labels": None, "annotations": None, **p})) for p in self.pods
        ]
        return SimpleNamespace(items=items)


def test_kubernetes_source_lists_only_its_node_and_relists_on_a_miss():
    api = CoreV1Stub([{"uid": "u1", "name": "a", "namespace": "ml", "labels": {"x": "y"}}])
    now = [0.0]
    source = KubernetesPodSource("node-a", api, resync_seconds=30, miss_backoff_seconds=5, clock=lambda: now[0])
    pods = source.pods(["u1"])
    assert pods["u1"].labels == {"x": "y"} and pods["u1"].annotations == {}
    assert api.calls == [{"field_selector": "spec.nodeName=node-a", "_request_timeout": 10}]
    source.pods(["u1"])
    assert len(api.calls) == 1  # fresh enough
    api.pods.append({"uid": "u2", "name": "b", "namespace": "ml"})
    now[0] = 2.0
    assert "u2" not in source.pods(["u1", "u2"])  # a miss, but within the backoff
    now[0] = 6.0
    assert "u2" in source.pods(["u1", "u2"])
    now[0] = 40.0
    source.pods([])
    assert len(api.calls) == 3  # the periodic resync


def test_kubernetes_source_errors_become_pod_source_errors():
    api = CoreV1Stub([])
    api.fail = True
    with pytest.raises(PodSourceError, match="listing pods of node node-a: connection refused"):
        KubernetesPodSource("node-a", api).pods([])
    with pytest.raises(PodSourceError, match="NODE_NAME is empty"):
        KubernetesPodSource("", api)
