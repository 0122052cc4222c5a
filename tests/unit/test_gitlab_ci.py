""".gitlab-ci.yml: valid against GitLab's published CI schema (draft-07, as vendored by the pinned
check-jsonschema package; resolved offline), every job in a declared stage, and every `make <target>`
and script it calls, also inside the scripts, exists in this repository."""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import re
import shlex
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from referencing import Registry
from referencing.exceptions import NoSuchResource

REPO = Path(__file__).resolve().parents[2]
PIPELINE = REPO / ".gitlab-ci.yml"
SCHEMA = importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "gitlab-ci.json"
# The schema file of check-jsonschema 0.39.0 (requirements-dev.txt); .ci/README.md says where it
# comes from. A new package version with another schema fails here until the README says so.
SCHEMA_SHA256 = "1c6eeb7d3a34c39996afbfe1ade220480eb05bbeae674e86d3c745dfeeded7fd"
# Top-level keys that are not jobs (GitLab's reserved keywords).
RESERVED = {"stages", "variables", "default", "workflow", "include", "image", "services", "cache", "spec"}
RESERVED |= {"before_script", "after_script"}
SCRIPT_KEYS = ("before_script", "script", "after_script")
_SEPARATORS = re.compile(r"\|\||&&|[\n;|()`]|\$\(")


def _offline(uri: str) -> Any:
    raise NoSuchResource(ref=uri)


def validator() -> jsonschema.Draft7Validator:
    schema = json.loads(SCHEMA.read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    return jsonschema.Draft7Validator(schema, registry=Registry(retrieve=_offline))


def schema_errors(pipeline: Mapping[str, Any]) -> list[str]:
    errors = sorted(validator().iter_errors(pipeline), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{'.'.join(map(str, e.absolute_path)) or '<top level>'}: {e.message}" for e in errors]


def jobs(pipeline: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every job (hidden templates left out) with its `extends` chain merged in."""

    def merged(name: str) -> dict[str, Any]:
        job = dict(pipeline[name])
        parents = job.pop("extends", [])
        result: dict[str, Any] = {}
        for parent in [parents] if isinstance(parents, str) else parents:
            result.update(merged(parent))
        variables = {**result.get("variables", {}), **job.get("variables", {})}
        return {**result, **job, "variables": variables}

    return {name: merged(name) for name in pipeline if name not in RESERVED and not name.startswith(".")}


def _expand(line: str, variables: Mapping[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: variables.get(m[1] or m[2], m[0]), line)


def make_targets_called(text: str) -> Iterator[str]:
    """The targets of each `make ...` command in shell text (options and VAR=value left out)."""
    for command in _SEPARATORS.split(text):
        try:
            words = shlex.split(command, comments=True)
        except ValueError:
            words = command.split()
        if words[:1] != ["make"]:
            continue
        yield from (word for word in words[1:] if not word.startswith("-") and "=" not in word)


def scripts_called(text: str) -> Iterator[str]:
    """Repository files run as commands: the first word of a command, when it is a relative path."""
    for command in _SEPARATORS.split(text):
        words = command.split()
        if words and "/" in words[0] and not words[0].startswith(("/", "$", '"')):
            yield words[0]


def job_shell(job: Mapping[str, Any], variables: Mapping[str, str]) -> str:
    lines = [line for key in SCRIPT_KEYS for line in job.get(key, [])]
    return "\n".join(_expand(line, {**variables, **job["variables"]}) for line in lines)


def make_database_targets() -> set[str]:
    """Every target GNU make knows in this repository (the Makefile and mk/*.mk)."""
    result = subprocess.run(
        ["make", "--no-print-directory", "-pRrq", "-C", str(REPO), ":"], capture_output=True, text=True, check=False
    )
    targets = set()
    for line in result.stdout.splitlines():
        if match := re.match(r"^([A-Za-z0-9][^\s:=#%]*):(?!=)", line):
            targets.add(match[1])
    return targets


def problems(pipeline: Mapping[str, Any]) -> list[str]:
    """Stages, make targets and scripts the pipeline names that do not exist."""
    found = []
    stages = pipeline.get("stages", [])
    targets = make_database_targets()
    variables = pipeline.get("variables", {})
    for name, job in jobs(pipeline).items():
        if job.get("stage") not in stages:
            found.append(f"{name}: stage {job.get('stage')!r} is not one of stages {stages}")
        shell = job_shell(job, variables)
        for script in scripts_called(shell):
            path = REPO / script
            if not path.is_file() or not path.stat().st_mode & 0o111:
                found.append(f"{name}: {script} is not an executable file of the repository")
                continue
            shell += "\n" + path.read_text()
        for target in make_targets_called(shell):
            if target not in targets:
                found.append(f"{name}: make {target}: no such target in the Makefile or mk/*.mk")
    return found


def load_pipeline() -> dict[str, Any]:
    return yaml.safe_load(PIPELINE.read_text())


def test_the_schema_is_the_vendored_one_and_resolves_offline() -> None:
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == SCHEMA_SHA256
    assert SCHEMA_SHA256 in (REPO / ".ci/README.md").read_text()
    remote = re.findall(r'"\$ref":\s*"(?!#)([^"]+)"', SCHEMA.read_text())
    assert remote == []


def test_the_pipeline_is_valid_against_gitlabs_schema() -> None:
    assert schema_errors(load_pipeline()) == []


def test_every_stage_make_target_and_script_the_pipeline_calls_exists() -> None:
    pipeline = load_pipeline()
    assert set(pipeline["stages"]) == {"validate", "test", "build", "gitops"}
    assert problems(pipeline) == []
    called = {t for job in jobs(pipeline).values() for t in make_targets_called(job_shell(job, pipeline["variables"]))}
    assert {"lint", "validate-models", "test-offline", "image-gateway", "image-drift"} <= called


@pytest.mark.parametrize(
    ("job", "where", "message"),
    [
        ({"stage": "test", "script": "make lint", "retry": 7}, "broken.retry", "7 is not valid"),
        ({"stage": "test", "scripts": ["make lint"]}, "broken", "('scripts' was unexpected)"),
        ({"stage": "test", "script": [{"make": "lint"}]}, "broken.script", "is not valid"),
    ],
)
def test_the_schema_rejects_a_broken_job_naming_it(job: dict[str, Any], where: str, message: str) -> None:
    errors = schema_errors({**load_pipeline(), "broken": job})
    assert any(error.startswith(f"{where}: ") and message in error for error in errors), errors


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ({"stage": "test", "script": ["make no-such-target"]}, "broken: make no-such-target: no such target"),
        ({"stage": "test", "script": ['make -s "image-${APP}"'], "variables": {"APP": "nope"}}, "make image-nope"),
        ({"stage": "test", "script": ["cd x && scripts/no-such-tool --x"]}, "scripts/no-such-tool is not an exec"),
        ({"stage": "release", "script": ["make lint"]}, "broken: stage 'release' is not one of stages"),
    ],
)
def test_a_missing_target_script_or_stage_is_named(job: dict[str, Any], message: str) -> None:
    found = problems({**load_pipeline(), "broken": job})
    assert any(message in problem for problem in found), found
