"""containerd has the nvidia runtime and the systemd cgroup driver, and runs."""

from tests.compliance import node_checks


def test_containerd_nvidia_runtime(node, verdict):
    verdict(node_checks.containerd_nvidia_runtime(node.facts, node.expected))


def test_containerd_systemd_cgroup(node, verdict):
    verdict(node_checks.containerd_systemd_cgroup(node.facts, node.expected))


def test_containerd_running(node, verdict):
    verdict(node_checks.containerd_running(node.facts, node.expected))
