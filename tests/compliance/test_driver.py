"""The driver packages: exactly the pinned version, held, apt-pinned, and out of unattended-upgrades' reach."""

from tests.compliance import node_checks


def test_driver_packages(node, verdict):
    verdict(node_checks.driver_packages(node.facts, node.expected))


def test_driver_held(node, verdict):
    verdict(node_checks.driver_held(node.facts, node.expected))


def test_apt_pin(node, verdict):
    verdict(node_checks.apt_pin(node.facts, node.expected))


def test_upgrade_blacklist(node, verdict):
    verdict(node_checks.upgrade_blacklist(node.facts, node.expected))
