"""Tests that need a program from `make deps` say so through `needs_tool`.

Outside CI a missing tool skips the test with a reason that starts with MISSING_TOOL. Under CI=true
that skip is a failure (tests/conftest.py): the Makefile installs every tool the gates need, so a
missing one is a broken install step, never a reason to prove less.
"""

from __future__ import annotations

import shutil

import pytest

MISSING_TOOL = "missing tool: "


def missing_tool(name: str, install: str) -> str:
    """The skip reason for a program that is not installed; `install` says how to get it."""
    return f"{MISSING_TOOL}{name} ({install})"


def needs_tool(name: str, install: str) -> pytest.MarkDecorator:
    """Skip (under CI=true: fail) the test when `name` is not on PATH."""
    return pytest.mark.skipif(shutil.which(name) is None, reason=missing_tool(name, install))
