"""Many corpus cases in one tritonserver: each case's changed model folder, renamed apart.

A server per case costs 3 to 9 s here (start, load, the graceful unload at stop); one server
for every case loads each changed model once. Every corpus case changes exactly one model
folder of the example repository; that folder is copied as `<case>--<folder>`, and where its
config names the folder (`name: "<folder>"`), the name gets the same prefix, so Triton sees
the case as written, under a name of its own. A config whose name differs from its folder
keeps its name: it still differs.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from model_repo_check.triton_engine import TritonReport, Verdict, check_with_triton

SEPARATOR = "--"


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def changed_folder(pristine: Path, mutated: Path) -> str:
    """The one model folder a case changed (added, renamed or edited)."""
    changed = [
        folder.name
        for folder in sorted(p for p in mutated.iterdir() if p.is_dir())
        if not (pristine / folder.name).is_dir() or _tree(folder) != _tree(pristine / folder.name)
    ]
    assert len(changed) == 1, f"{mutated}: a corpus case must change exactly one model folder, changed {changed}"
    return changed[0]


def add_case(combined: Path, case_id: str, mutated: Path, folder: str) -> str:
    """Copy `mutated/folder` into `combined` under a name of its own; returns that name."""
    name = f"{case_id}{SEPARATOR}{folder}"
    shutil.copytree(mutated / folder, combined / name)
    config = combined / name / "config.pbtxt"
    if config.is_file():
        pattern = re.compile(rf'^(name\s*:\s*)"{re.escape(folder)}"', re.MULTILINE)
        config.write_text(pattern.sub(rf'\1"{name}"', config.read_text(), count=1))
    return name


def judge_cases(
    cases: Iterable[tuple[str, Callable[[Path], None]]], pristine: Path, work: Path
) -> tuple[TritonReport, dict[str, Verdict]]:
    """Mutate a copy of `pristine` per case, then load every changed folder into one server."""
    combined = work / "combined"
    combined.mkdir(parents=True)
    names: dict[str, str] = {}
    for case_id, mutate in cases:
        mutated = work / "cases" / case_id
        shutil.copytree(pristine, mutated)
        mutate(mutated)
        names[case_id] = add_case(combined, case_id, mutated, changed_folder(pristine, mutated))
    report = check_with_triton(combined, list(names.values()))
    by_name = {verdict.model: verdict for verdict in report.verdicts}
    return report, {case_id: by_name[name] for case_id, name in names.items()}
