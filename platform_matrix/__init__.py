"""The platform matrix: pinned versions and the rules between them (see matrix.yml)."""

from platform_matrix.compat import Problem, Stack, check, node_facts, pinned_stack
from platform_matrix.matrix import DEFAULT_PATH, Matrix, MatrixError, load

__all__ = [
    "DEFAULT_PATH",
    "Matrix",
    "MatrixError",
    "Problem",
    "Stack",
    "check",
    "load",
    "node_facts",
    "pinned_stack",
]
