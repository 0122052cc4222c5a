"""The limiter agent and the DCGM exporter serve their metrics where the add-ons are deployed."""

import pytest

from tests.compliance import node_checks


@pytest.mark.parametrize("check", ["limiter", "dcgm_exporter"])
def test_metrics(node, verdict, check):
    verdict(node_checks.addon_metrics(node.facts, node.expected, check))
