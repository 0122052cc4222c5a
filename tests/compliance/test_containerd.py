"""containerd runs, has the nvidia runtime and the systemd cgroup driver, runs runc unless a pod asks
for RuntimeClass nvidia, and the toolkit gives unprivileged containers GPUs only as volume mounts."""

from tests.compliance import node_checks


def test_containerd_nvidia_runtime(node, verdict):
    verdict(node_checks.containerd_nvidia_runtime(node.facts, node.expected))


def test_containerd_systemd_cgroup(node, verdict):
    verdict(node_checks.containerd_systemd_cgroup(node.facts, node.expected))


def test_containerd_default_runtime(node, verdict):
    verdict(node_checks.containerd_default_runtime(node.facts, node.expected))


def test_containerd_running(node, verdict):
    verdict(node_checks.containerd_running(node.facts, node.expected))


def test_toolkit_isolation(node, verdict):
    verdict(node_checks.toolkit_isolation(node.facts, node.expected))
