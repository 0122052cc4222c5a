"""The import layers of .importlinter, checked by import-linter itself (`lint-imports`): product code
imports neither the labs, nor the tests, nor the benchmarks, and the modules and subpackages of a
package import each other without a cycle. What import-linter has no contract for, a cycle of
modules across root packages, is found on its own graph library (grimp)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import grimp
import pytest
from importlinter.api import read_configuration

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / ".importlinter"
# Where the root packages are: gpu_serving lives in pulumi/, cgroup_limiter in limiter/.
SOURCE_DIRS = (REPO, REPO / "pulumi", REPO / "limiter")


def test_the_import_contracts_hold() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    run = subprocess.run(
        [str(lint_imports), str(CONFIG), "--no-cache"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(map(str, SOURCE_DIRS))},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"Contracts: [1-9]\d* kept, 0 broken", run.stdout), run.stdout


def test_no_module_import_cycle_across_the_root_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    for directory in reversed(SOURCE_DIRS):
        monkeypatch.syspath_prepend(str(directory))
    roots = read_configuration(str(CONFIG))["session_options"]["root_packages"]
    graph = grimp.build_graph(*roots, cache_dir=None)
    assert {"model_repo_check.tritonserver.server", "gpu_serving.config", "cgroup_limiter"} <= graph.modules
    imported_by = {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}
    try:
        TopologicalSorter(imported_by).prepare()
    except CycleError as error:
        # Each module of the reported cycle is imported by the next one: reversed, it reads as imports.
        pytest.fail("import cycle: " + " -> ".join(reversed(error.args[1])))


def test_no_import_cycle_between_the_root_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    """A layer graph: package A above package B when a module of A imports one of B, never both ways."""
    for directory in reversed(SOURCE_DIRS):
        monkeypatch.syspath_prepend(str(directory))
    roots = read_configuration(str(CONFIG))["session_options"]["root_packages"]
    graph = grimp.build_graph(*roots, cache_dir=None)
    imports: dict[str, set[str]] = {root: set() for root in roots}
    for module in graph.modules:
        package = module.split(".")[0]
        if package in imports:
            imports[package] |= {m.split(".")[0] for m in graph.find_modules_directly_imported_by(module)}
    imports = {package: (imported & set(roots)) - {package} for package, imported in imports.items()}
    try:
        TopologicalSorter(imports).prepare()
    except CycleError as error:
        cycle = " -> ".join(reversed(error.args[1]))
        pytest.fail(f"packages import each other: {cycle}; move what both need to the lower one")
