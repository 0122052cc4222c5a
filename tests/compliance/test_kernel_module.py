"""The kernel module is built for the running kernel at the pinned version (modinfo -k, dkms status)."""

from tests.compliance import node_checks


def test_kernel_module(node, verdict):
    verdict(node_checks.kernel_module(node.facts, node.expected))
