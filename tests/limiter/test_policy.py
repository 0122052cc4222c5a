"""A pod's policy from the node config and its annotations; protection always wins."""

from __future__ import annotations

from cgroup_limiter.config import parse_config
from cgroup_limiter.pods import PodInfo
from cgroup_limiter.policy import pod_policy

CONFIG = parse_config(
    {
        "protect": [{"labels": {"app.kubernetes.io/name": "triton"}}, {"namespaces": ["kube-system"]}],
        "defaults": {"io_max": {"vda": {"wbps": "500M"}}, "cpu_weight": 80},
        "adaptive": {"mode": "threshold", "threshold_bps": "100M", "ceiling_bps": "50M", "release_bps": "25M"},
    },
    "config.yaml",
)


def pod(labels=None, annotations=None, namespace="batch") -> PodInfo:
    return PodInfo("u", namespace, "etl", labels or {}, annotations or {})


def test_defaults_apply_to_an_unannotated_pod():
    policy = pod_policy(pod(), CONFIG)
    assert not policy.protected
    assert policy.io_max == {"vda": (None, 500_000_000, None, None)}
    assert policy.cpu_weight == 80 and policy.cpu_max is None
    assert policy.adaptive is not None and policy.adaptive.ceiling_bps == 50_000_000


def test_annotations_override_per_key():
    policy = pod_policy(
        pod(
            annotations={
                "limiter.gpu-serving.io/io-max": "vda rbps=10M; 8:0 wiops=10",
                "limiter.gpu-serving.io/cpu-weight": "5",
                "limiter.gpu-serving.io/adaptive-ceiling": "30M",
                "limiter.gpu-serving.io/adaptive-release": "10M",
            }
        ),
        CONFIG,
    )
    assert policy.io_max == {"vda": (10_000_000, None, None, None), "8:0": (None, None, None, 10)}
    assert policy.cpu_weight == 5
    assert policy.adaptive is not None
    assert (policy.adaptive.ceiling_bps, policy.adaptive.release_bps) == (30_000_000, 10_000_000)
    assert policy.errors == ()


def test_protected_by_label_namespace_or_annotation_gets_nothing():
    for candidate in (
        pod(labels={"app.kubernetes.io/name": "triton"}),
        pod(namespace="kube-system"),
        pod(annotations={"limiter.gpu-serving.io/protected": "true"}),
    ):
        policy = pod_policy(candidate, CONFIG)
        assert policy.protected and policy.adaptive is None and not policy.io_max and policy.cpu_weight is None


def test_a_config_protected_pod_cannot_unprotect_itself():
    triton = pod(labels={"app.kubernetes.io/name": "triton"}, annotations={"limiter.gpu-serving.io/protected": "false"})
    assert pod_policy(triton, CONFIG).protected


def test_opting_out_of_adaptive_throttling():
    assert pod_policy(pod(annotations={"limiter.gpu-serving.io/adaptive": "false"}), CONFIG).adaptive is None


def test_bad_annotations_are_ignored_and_named():
    policy = pod_policy(
        pod(
            annotations={
                "limiter.gpu-serving.io/cpu-max": "a lot",
                "limiter.gpu-serving.io/adaptive-ceiling": "200M",
                "limiter.gpu-serving.io/iomax": "vda wbps=1M",
            }
        ),
        CONFIG,
    )
    assert policy.cpu_max is None
    assert policy.adaptive is not None and policy.adaptive.ceiling_bps == 50_000_000
    assert len(policy.errors) == 3
    assert any("annotation limiter.gpu-serving.io/cpu-max" in e for e in policy.errors)
    assert any("unknown annotation limiter.gpu-serving.io/iomax" in e for e in policy.errors)
    assert any("above threshold_bps" in e for e in policy.errors)


def test_a_pod_chooses_its_adaptive_mode_by_annotation():
    node = parse_config({"adaptive": {"mode": "contention"}}, "config.yaml")
    assert pod_policy(pod(), node).adaptive.mode == "contention"
    asked = pod_policy(pod(annotations={"limiter.gpu-serving.io/adaptive-mode": "threshold"}), node)
    assert asked.adaptive.mode == "threshold" and asked.adaptive.threshold_bps == 100_000_000
    bad = pod_policy(pod(annotations={"limiter.gpu-serving.io/adaptive-mode": "always"}), node)
    assert bad.adaptive.mode == "contention"
    assert bad.errors == (
        "pod batch/etl: annotation limiter.gpu-serving.io/adaptive-mode: "
        "expected one of contention, threshold, got 'always'; ignored",
    )
