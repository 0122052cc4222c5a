"""The Kubernetes pod source: list, then watch from resourceVersion with bookmarks, scoped to the
node; 410 Gone relists; other failures back off (doubling, capped) and resume. Against
kube_fake.FakeCoreV1, the stand-in for the unreachable API server."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterator

import pytest
from cgroup_limiter.kube_source import KubernetesPodSource
from cgroup_limiter.metrics import Metrics
from cgroup_limiter.pods import MIRROR_ANNOTATION, PodSourceError
from urllib3.exceptions import ProtocolError

from tests.limiter.kube_fake import FakeCoreV1, gone, pod, wait_until


class Changes:
    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            self.count += 1


def errors(metrics: Metrics, reason: str) -> float:
    return metrics.registry.get_sample_value("cgroup_limiter_pod_source_errors_total", {"reason": reason}) or 0.0


@pytest.fixture
def api() -> FakeCoreV1:
    return FakeCoreV1([pod("u1", "train", 90, labels={"team": "a"})], version=100)


@pytest.fixture
def source(api: FakeCoreV1) -> Iterator[tuple[KubernetesPodSource, Changes]]:
    changes = Changes()
    source = KubernetesPodSource("node-a", api, Metrics(), backoff_seconds=0.02, max_backoff_seconds=0.08)
    source.start(changes)
    try:
        yield source, changes
    finally:
        source.stop()
    assert source._thread is not None and not source._thread.is_alive(), "the watch thread did not stop"


def test_lists_then_watches_its_node_from_the_lists_version_with_bookmarks(api, source):
    source, changes = source
    watch = api.next_watch()
    (_, listed), (_, watched) = api.calls
    assert listed == {"field_selector": "spec.nodeName=node-a", "_preload_content": False, "_request_timeout": 30}
    assert watched["field_selector"] == "spec.nodeName=node-a"
    assert (watched["watch"], watched["allow_watch_bookmarks"], watched["resource_version"]) == (True, True, "100")
    assert watched["timeout_seconds"] == 300 and watched["_preload_content"] is False
    assert source.pods()["u1"].labels == {"team": "a"}
    assert changes.count == 1  # the list: the agent learns its pods

    watch.send({"type": "ADDED", "object": pod("u2", "etl", 101)}, split=True)
    wait_until(lambda: "u2" in source.pods())
    assert changes.count == 2
    status_only = pod("u2", "etl", 102) | {"status": {"phase": "Succeeded"}}
    watch.send({"type": "MODIFIED", "object": status_only})
    relabelled = pod("u2", "etl", 103, labels={"limiter": "x"})
    watch.send({"type": "MODIFIED", "object": relabelled})
    wait_until(lambda: source.pods()["u2"].labels == {"limiter": "x"})
    assert changes.count == 3  # the status update changed nothing the agent reads: no wake-up
    watch.send({"type": "DELETED", "object": pod("u1", "train", 104)})
    wait_until(lambda: "u1" not in source.pods())
    watch.send({"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "250"}}})
    watch.end()  # the server's timeoutSeconds: resume from the bookmark, no list
    api.next_watch()
    assert api.kinds() == ["list", "watch@100", "watch@250"]
    assert set(source.pods()) == {"u2"}


def test_a_mirror_pod_is_found_under_its_config_hash(api, source):
    source, _ = source
    static = pod("u9", "etcd-node-a", 101, annotations={MIRROR_ANNOTATION: "5f1e0c9a8b7d"})
    api.next_watch().send({"type": "ADDED", "object": static})
    wait_until(lambda: "5f1e0c9a8b7d" in source.pods())


@pytest.mark.parametrize("how", ["error event", "http status"])
def test_410_gone_lists_again_and_counts_it(api, source, how, caplog):
    caplog.set_level(logging.WARNING)
    source, _ = source
    watch = api.next_watch()
    del api.pods["u1"]  # deleted while the watch was away: only a new list can tell
    api.pods["u3"] = pod("u3", "late", 300)
    api.version = 300
    if how == "error event":
        status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version: 100"}
        watch.send({"type": "ERROR", "object": status})
    else:
        api.failures.append(gone())
        watch.end()
    api.next_watch()
    expected = ["list", "watch@100", "list", "watch@300"]
    if how == "http status":
        expected.insert(2, "watch@100")  # the resumed watch is answered 410
    assert api.kinds() == expected
    assert set(source.pods()) == {"u3"}
    assert errors(source.metrics, "gone") == 1
    assert "listing again" in caplog.text


def test_unreachable_api_backs_off_doubling_to_the_cap_then_recovers(api):
    refused = ConnectionRefusedError(111, "Connection refused")
    api.failures = [refused] * 5
    metrics = Metrics()
    source = KubernetesPodSource("node-a", api, metrics, backoff_seconds=0.02, max_backoff_seconds=0.08)
    with pytest.raises(PodSourceError, match="pods of node node-a: no pod list yet"):
        source.pods()
    source.start(lambda: None)
    try:
        wait_until(lambda: errors(metrics, "list") >= 1)
        with pytest.raises(PodSourceError, match=r"list failed: .*Connection refused"):
            source.pods()
        api.next_watch()
    finally:
        source.stop()
    times = [at for at, _ in api.calls]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    for gap, floor in zip(gaps, (0.02, 0.04, 0.08, 0.08, 0.08), strict=False):
        assert gap >= floor * 0.9, f"retried after {gap:.3f}s, backoff {floor}s"
    assert errors(metrics, "list") == 5
    assert api.kinds()[-2:] == ["list", "watch@100"]
    assert "u1" in source.pods()


def test_a_broken_watch_resumes_from_its_last_version_without_a_list(api, source):
    source, _ = source
    watch = api.next_watch()
    watch.send({"type": "ADDED", "object": pod("u2", "etl", 140)})
    wait_until(lambda: "u2" in source.pods())
    watch.fail(ProtocolError("Connection broken: IncompleteRead"))
    api.next_watch()
    assert api.kinds() == ["list", "watch@100", "watch@140"]
    assert errors(source.metrics, "watch") == 1


def test_a_watch_error_other_than_gone_backs_off_and_resumes(api, source):
    source, _ = source
    watch = api.next_watch()
    watch.send({"type": "ERROR", "object": {"kind": "Status", "code": 500, "reason": "InternalError", "message": "x"}})
    api.next_watch()
    assert api.kinds() == ["list", "watch@100", "watch@100"]
    assert errors(source.metrics, "watch") == 1


def test_node_name_is_required():
    with pytest.raises(PodSourceError, match="NODE_NAME is empty"):
        KubernetesPodSource("", FakeCoreV1())
