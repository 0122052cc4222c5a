"""The pods file as a pod source (the Kubernetes watch: test_kube_watch.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
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
