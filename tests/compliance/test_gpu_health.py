"""GPU health through NVML (read on the node, or in-process for local://), judged by gpu_health.checks."""

import pytest

from gpu_health.checks import CHECKS, evaluate


@pytest.mark.parametrize("check", CHECKS)
def test_gpu(node, verdict, check):
    verdict(evaluate(node.facts["gpu"], node.expected.gpu)[check])
