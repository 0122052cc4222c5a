"""cgroup v2 is the unified hierarchy and offers the controllers the limiter needs."""

from tests.compliance import node_checks


def test_cgroup_unified(node, verdict):
    verdict(node_checks.cgroup_unified(node.facts, node.expected))


def test_cgroup_controllers(node, verdict):
    verdict(node_checks.cgroup_controllers(node.facts, node.expected))
