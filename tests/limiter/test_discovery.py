"""Pod cgroups in both kubelet layouts, every QoS class; other cgroups are left alone."""

from __future__ import annotations

from cgroup_limiter.discovery import discover
from hypothesis import given
from hypothesis import strategies as st

from tests.limiter.conftest import FakeNode

UIDS = ["11111111-aaaa-4bbb-8ccc-000000000001", "22222222-aaaa-4bbb-8ccc-000000000002"]


def test_both_drivers_every_qos(node: FakeNode):
    expected = set()
    for driver in ("systemd", "cgroupfs"):
        for index, qos in enumerate(("guaranteed", "burstable", "besteffort")):
            uid = f"{driver[:4].encode().hex()}-0000-4000-8000-00000000000{index}"
            path = node.add_pod(f"{driver}-{qos}", uid, qos=qos, driver=driver)
            expected.add((uid, qos, str(path), driver))
    found = {(c.uid, c.qos, c.path, c.driver) for c in discover(node.root)}
    assert found == expected


def test_systemd_unit_names_carry_the_uid_with_underscores(node: FakeNode):
    path = node.add_pod("a", UIDS[0], driver="systemd")
    assert "_" in path.name
    (cgroup,) = discover(node.root)
    assert cgroup.uid == UIDS[0]


def test_containers_and_other_cgroups_are_not_pods(node: FakeNode):
    path = node.add_pod("a", UIDS[0])
    (path / "cri-containerd-abc.scope").mkdir()
    (node.root / "kubepods/burstable/not-a-pod").mkdir()
    (node.root / "kubepods.slice/kubepods-burstable.slice").mkdir(parents=True)
    # a burstable pod unit placed under the wrong QoS slice is not taken for a pod of that slice
    (node.root / "kubepods.slice/kubepods-besteffort.slice/kubepods-burstable-pod1234.slice").mkdir(parents=True)
    (node.root / "system.slice/kubepods-pod1.slice").mkdir(parents=True)
    (node.root / "kubepods/burstable/poda-file").write_text("")
    assert [c.uid for c in discover(node.root)] == [UIDS[0]]


def test_no_kubepods_at_all(node: FakeNode):
    assert discover(node.root) == []
    assert discover(node.root / "absent") == []


@given(st.uuids())
def test_any_uid_round_trips_through_the_systemd_name(uid):
    from pathlib import Path
    from tempfile import TemporaryDirectory

    with TemporaryDirectory() as tmp:
        node = FakeNode(Path(tmp))
        node.add_pod("p", str(uid), driver="systemd", qos="besteffort")
        assert [c.uid for c in discover(node.root)] == [str(uid)]
