"""The checks of `python -m monitoring check`, each returning problem lines that start with the
file they are about: promtool on rule files and their unit tests, amtool on the Alertmanager
config and its route tests, and the rules of monitoring/spec.py on any rule file."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from monitoring import alerting, spec

HERE = Path(__file__).resolve().parent
ALERTMANAGER = HERE / "alertmanager.yml"
ROUTE_TESTS = HERE / "alertmanager_tests.yml"
UNIT_TESTS = (HERE / "tests", HERE / "generated" / "tests")
_PREFIX = re.compile(r"^(Checking \S+\s*|\s*FAILED:\s*)")  # what the tools print before a finding
_NOISE = re.compile(r"^(Unit Testing: |\s*SUCCESS|amtool: error: failed to validate|Warning: )")


def relative(path: Path) -> str:
    path = path.resolve()
    return path.relative_to(HERE.parent).as_posix() if path.is_relative_to(HERE.parent) else str(path)


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed (Debian: prometheus, prometheus-alertmanager)")
    return found


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_tool(command[0]), *command[1:]], capture_output=True, text=True, check=False)


def _failure(source: Path, what: str, result: subprocess.CompletedProcess[str]) -> list[str]:
    if result.returncode == 0:
        return []
    lines = [line.rstrip() for line in (result.stdout + result.stderr).splitlines()]
    detail = "\n".join(_clean(lines))
    return [f"{relative(source)}: {what} failed:\n{detail}"]


def _clean(lines: list[str]) -> list[str]:
    """The findings of a tool's output, without its banners."""
    kept = (_PREFIX.sub("", line) for line in lines if not _NOISE.match(line))
    return [line for line in kept if line.strip()]


def rule_file(path: Path) -> list[str]:
    """promtool check rules, then monitoring.spec (severity, annotations, runbook) on one rule file."""
    found = _failure(path, "promtool check rules", _run("promtool", "check", "rules", str(path)))
    if found:
        return found
    return spec.problems(yaml.safe_load(path.read_text(encoding="utf-8")), relative(path))


def rule_text(text: str, shown_as: str) -> list[str]:
    """rule_file() on the text a build would write, each problem naming `shown_as`."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rules.yml"
        path.write_text(text, encoding="utf-8")
        return [problem.replace(str(path), shown_as) for problem in rule_file(path)]


def unit_test_files(folders: tuple[Path, ...] = UNIT_TESTS) -> list[Path]:
    return sorted(path for folder in folders for path in folder.glob("*.yml"))


def unit_tests(paths: list[Path]) -> list[str]:
    """promtool test rules, one file at a time so that each failure names its test file."""
    return [
        problem
        for path in paths
        for problem in _failure(path, "promtool test rules", _run("promtool", "test", "rules", str(path)))
    ]


@contextmanager
def _for_amtool(path: Path) -> Iterator[Path]:
    """A copy of the config that Debian's amtool (0.25, no `url_file`) reads: each webhook's URL
    a placeholder named by its Secret key, everything else as written."""
    config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    readable = alerting.with_urls(config, "http://receivers.invalid")
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / path.name
        copy.write_text(yaml.safe_dump(readable, sort_keys=False), encoding="utf-8")
        yield copy


def alertmanager_config(path: Path = ALERTMANAGER) -> list[str]:
    """monitoring.alerting's problems (undefined receivers, URLs not read from the Secret), then
    amtool check-config."""
    found = alerting.problems(yaml.safe_load(path.read_text(encoding="utf-8")), relative(path))
    if found:
        return found
    with _for_amtool(path) as copy:
        result = _run("amtool", "check-config", str(copy))
    return _failure(path, "amtool check-config", result)


def route_cases(path: Path = ROUTE_TESTS) -> list[dict[str, Any]]:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or []


def route_tests(config: Path = ALERTMANAGER, cases: Path = ROUTE_TESTS) -> list[str]:
    """amtool config routes test for each case: its labels must reach exactly its receivers."""
    found = []
    with _for_amtool(config) as readable:
        for case in route_cases(cases):
            labels = [f"{name}={value}" for name, value in case["labels"].items()]
            result = _run(
                "amtool",
                "config",
                "routes",
                "test",
                f"--config.file={readable}",
                f"--verify.receivers={','.join(case['receivers'])}",
                *labels,
            )
            if result.returncode:
                output = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
                mismatch = any(line.startswith("WARNING: Expected receivers did not match") for line in output)
                got = f"reached {output[0]}" if mismatch else "failed: " + " ".join(_clean(output))
                found.append(
                    f"{relative(cases)}: case {case['name']!r} ({case['route']} of {relative(config)}):"
                    f" {' '.join(labels)} {got}, expected {','.join(case['receivers'])}"
                )
    return found


def stale(files: dict[Path, str]) -> list[str]:
    """Generated files that differ from what the sources give now."""
    return [
        f"{relative(path)}: differs from its source: run `python -m monitoring build` (make monitoring)"
        for path, text in files.items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]
