"""Differential test: generated configs (config_mutations.py) judged by the rules engine and by
the real tritonserver 2.51 (release 24.10); any disagreement fails, with every disagreeing case
written to a file. FIXED_CASES with the fixed seed, plus RANDOM_CASES with a fresh seed each run
(DIFFERENTIAL_SEED=<n> replays one); both seeds are printed. Needs .venv-triton; about a minute.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from tests.model_repository.config_mutations import generate
from tests.model_repository.differential import judge

pytestmark = pytest.mark.serving_lab

FIXED_SEED = 12
FIXED_CASES = 2000
RANDOM_CASES = 500


def random_seed() -> int:
    return int(os.environ.get("DIFFERENTIAL_SEED") or secrets.randbelow(2**31))


def test_rules_engine_and_triton_agree_on_generated_configs(tmp_path: Path) -> None:
    seed = random_seed()
    cases = generate(FIXED_SEED, FIXED_CASES, "f") + generate(seed, RANDOM_CASES, "r")
    run = judge(cases, tmp_path / "repository")
    failures = tmp_path / "disagreements.txt"
    excluded = "".join(f"{case.describe()}: {case.excluded}\n" for case in run.excluded)
    (tmp_path / "excluded.txt").write_text(excluded)
    summary = (
        f"differential: {len(cases)} cases (seed {FIXED_SEED}: {FIXED_CASES}, random seed {seed}: {RANDOM_CASES}; "
        f"replay with DIFFERENTIAL_SEED={seed}), {len(run.outcomes)} compared, {len(run.excluded)} excluded "
        f"(reasons in {tmp_path / 'excluded.txt'}), {len(run.disagreements)} disagreement(s); "
        f"rules engine {run.rules_seconds:.1f} s, triton {run.triton_seconds:.1f} s"
    )
    print(summary)
    if run.disagreements:
        failures.write_text("\n".join(outcome.report() for outcome in run.disagreements))
    assert not run.disagreements, f"{summary}; the cases are in {failures}"
    assert len(cases) >= 2000
    assert sum(outcome.triton.status == "failed" for outcome in run.outcomes) > len(run.outcomes) // 4
    assert sum(outcome.triton.status == "ok" for outcome in run.outcomes) > len(run.outcomes) // 4
