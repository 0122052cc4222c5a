"""Mitogen's linear strategy under a name this repository's ansible.cfg can point at.

Mitogen keeps one Python interpreter per node for the whole play and runs every module
in it, so a task costs a function call on the node instead of a fresh interpreter that
unpacks and compiles the module and its module_utils. The pinned `mitogen` package
(requirements.txt) provides the strategy; set ANSIBLE_STRATEGY=linear to run without it.
"""

from __future__ import annotations

from ansible_mitogen.plugins.strategy.mitogen_linear import StrategyModule

__all__ = ["StrategyModule"]
