"""Run generated cases (config_mutations.py) through both engines and compare their verdicts.

All cases go into one repository, with the ensemble members, and through one tritonserver
(`check_with_triton`, explicit model control: one load per case) and one run of the rules
engine (`validate_repository`, target: this machine's 0 GPUs and the server's release, so both
parse with the same model_config.proto). A case fails under the rules
engine when it has an error there; under Triton when its load fails. Excluded cases are
written and loaded like the others (the repository is the same for every seed), but not compared.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format

import platform_matrix
from model_repo_check import validate_repository
from model_repo_check.triton_engine import Status, Verdict, check_with_triton
from tests.model_repository.config_mutations import Case, write_members

# The release of .venv-triton's tritonserver (24.10).
LAB_RELEASE: str = platform_matrix.load().serving_lab["triton"]["release"]


@dataclass(frozen=True)
class Outcome:
    case: Case
    rules_errors: tuple[str, ...]
    triton: Verdict

    @property
    def agrees(self) -> bool:
        return bool(self.rules_errors) == (self.triton.status is Status.FAILED)

    def report(self) -> str:
        rules = "\n".join(f"    {error}" for error in self.rules_errors) or "    (no error)"
        return (
            f"== {self.case.describe()}\n"
            f"  triton: {self.triton.status} {self.triton.message}\n"
            f"  rules engine:\n{rules}\n"
            f"  config.pbtxt:\n{_indent(text_format.MessageToString(self.case.config))}"
        )


def _indent(text: str) -> str:
    return "".join(f"    {line}\n" for line in text.splitlines())


@dataclass
class Run:
    outcomes: list[Outcome]
    excluded: list[Case]
    rules_seconds: float
    triton_seconds: float

    @property
    def disagreements(self) -> list[Outcome]:
        return [outcome for outcome in self.outcomes if not outcome.agrees]


def judge(cases: list[Case], repository: Path) -> Run:
    write_members(repository)
    for case in cases:
        case.write(repository)
    started = time.monotonic()
    report = validate_repository(repository, gpus=0, release=LAB_RELEASE)
    rules_seconds = time.monotonic() - started
    errors: dict[str, list[str]] = defaultdict(list)
    for finding in report.errors:
        errors[finding.location.path.relative_to(repository).parts[0]].append(str(finding))
    started = time.monotonic()
    compared = [case for case in cases if case.excluded is None]
    triton = check_with_triton(repository, [case.name for case in compared], crash_retries=0)
    triton_seconds = time.monotonic() - started
    verdicts = {verdict.model: verdict for verdict in triton.verdicts}
    outcomes = [Outcome(case, tuple(errors[case.name]), verdicts[case.name]) for case in compared]
    return Run(outcomes, [case for case in cases if case.excluded], rules_seconds, triton_seconds)
