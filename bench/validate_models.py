"""make bench-validate: both engines on one generated repository of 1,000 models.

Target (issue 12): the rules engine validates 1,000 models in under 3 s. Beside it, the
triton engine's time per model (the real tritonserver of .venv-triton, one load per model),
measured in the same run on a sample of the same repository, when .venv-triton is there.

The corpus, in rounds of ten models (eleven folders), under new names (`<kind>-<nnnn>`):
  text-classifier (3 in 10)  model_repository/'s batching classifier, two ONNX versions, warmup
  image-preprocess (2 in 10) the fixed-shape example, two CPU instances, warmup
  quick-start (3 in 10)      Triton's quick-start models in turn (tests/model_repository/quickstart:
                             strings, sequence controls, implicit state), with their ONNX graphs
  tensorrt (1 in 10)         a TensorRT classifier with dynamic batching and a placeholder plan
                             (neither engine reads a plan: the triton engine's is a stand-in backend)
  ensemble (1 in 10)         an ensemble over its own copy of quick-start's `simple` (two folders)
Every ONNX file is its own (a copy of its model with a doc string naming the copy), so no two
files share a hash, as in a real repository. Every model is valid: both engines must come back
clean on all of them, or the benchmark stops.

Timed: the whole command once (`scripts/validate_model_repo --strict`: a new process, imports
and all; this is the number held against the target), then the rules engine in this process
(`validate_repository`, median of --repeats). The triton engine loads the models numbered below
--triton-sample (every kind in its share; an ensemble with its member): it does not unload, so
all 1,000 would keep about 1,000 Python backend stubs alive on this machine at once.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from model_repo_check import validate_repository  # noqa: E402
from tests.model_repository.quickstart_models import BUILDERS, build  # noqa: E402

EXAMPLES = ROOT / "model_repository"
SCRIPT = ROOT / "scripts/validate_model_repo"
TARGET_S = 3.0
TRT_CONFIG = """name: "{name}"
platform: "tensorrt_plan"
max_batch_size: 32
input [ {{ name: "input_ids", data_type: TYPE_INT32, dims: [ 128 ] }} ]
output [ {{ name: "logits", data_type: TYPE_FP32, dims: [ 4 ] }} ]
dynamic_batching {{ preferred_batch_size: [ 8, 16 ], max_queue_delay_microseconds: 2000 }}
instance_group [ {{ kind: KIND_CPU, count: 2 }} ]
"""
ENSEMBLE_CONFIG = """name: "{name}"
platform: "ensemble"
max_batch_size: 8
input [
  {{ name: "A", data_type: TYPE_INT32, dims: [ 16 ] }},
  {{ name: "B", data_type: TYPE_INT32, dims: [ 16 ] }}
]
output [
  {{ name: "SUM", data_type: TYPE_INT32, dims: [ 16 ] }},
  {{ name: "DIFF", data_type: TYPE_INT32, dims: [ 16 ] }}
]
ensemble_scheduling {{
  step [
    {{
      model_name: "{member}"
      model_version: -1
      input_map {{ key: "INPUT0", value: "A" }}
      input_map {{ key: "INPUT1", value: "B" }}
      output_map {{ key: "OUTPUT0", value: "SUM" }}
      output_map {{ key: "OUTPUT1", value: "DIFF" }}
    }}
  ]
}}
"""


def _rename(folder: Path, old: str, new: str) -> None:
    config = folder / "config.pbtxt"
    config.write_text(config.read_text().replace(f'name: "{old}"', f'name: "{new}"'))


def _own_onnx_files(folder: Path) -> None:
    """Give each model file of this copy its own bytes (and hash): the copy's name as doc string."""
    for path in folder.glob("*/model.onnx"):
        model = onnx.load(path)
        model.doc_string = f"{model.doc_string} (benchmark copy {folder.name})"
        onnx.save(model, path)


def _copy(source: Path, base: str, name: str, repository: Path) -> None:
    target = repository / name
    shutil.copytree(source / base, target, ignore=shutil.ignore_patterns("*.csv", "README.md"))
    _rename(target, base, name)
    _own_onnx_files(target)


def _tensorrt(name: str, repository: Path) -> None:
    (repository / name / "1").mkdir(parents=True)
    (repository / name / "1/model.plan").write_bytes(b"placeholder plan: no engine reads it\n")
    (repository / name / "config.pbtxt").write_text(TRT_CONFIG.format(name=name))


def _ensemble(name: str, quickstart: Path, repository: Path) -> None:
    member = f"{name}-simple"
    _copy(quickstart, "simple", member, repository)
    (repository / name / "1").mkdir(parents=True)
    (repository / name / "config.pbtxt").write_text(ENSEMBLE_CONFIG.format(name=name, member=member))


def generate(repository: Path, count: int) -> dict[str, int]:
    """`count` model folders (an ensemble brings its member: it counts as two); kind -> folders."""
    repository.mkdir(parents=True)
    quickstart = build(repository.parent / "quickstart-source")
    kinds: dict[str, int] = {}
    quick = sorted(BUILDERS)

    def example(base: str) -> Callable[[str], None]:
        return lambda name: _copy(EXAMPLES, base, name, repository)

    def quick_start(name: str) -> None:
        _copy(quickstart, quick[kinds.get("quickstart", 0) % len(quick)], name, repository)

    plan: list[tuple[str, Callable[[str], None]]] = [
        ("text-classifier", example("text-classifier")),
        ("image-preprocess", example("image-preprocess")),
        ("text-classifier", example("text-classifier")),
        ("quickstart", quick_start),
        ("tensorrt", lambda name: _tensorrt(name, repository)),
        ("quickstart", quick_start),
        ("image-preprocess", example("image-preprocess")),
        ("ensemble", lambda name: _ensemble(name, quickstart, repository)),
        ("text-classifier", example("text-classifier")),
        ("quickstart", quick_start),
    ]
    made = step = 0
    while made < count:
        kind, make = plan[step % len(plan)]
        make(f"{kind}-{made:04d}")
        kinds[kind] = kinds.get(kind, 0) + 1
        made += 2 if kind == "ensemble" else 1
        step += 1
    return kinds


def time_rules(repository: Path, count: int) -> float:
    start = time.perf_counter()
    report = validate_repository(repository)
    elapsed = time.perf_counter() - start
    if report.findings or len(report.models) != count:
        found = "\n".join(map(str, report.findings[:20]))
        raise SystemExit(f"rules engine: {len(report.models)} models, findings:\n{found}")
    return elapsed


def time_command(repository: Path, count: int) -> float:
    start = time.perf_counter()
    run = subprocess.run([sys.executable, str(SCRIPT), str(repository), "--strict"], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if run.returncode != 0 or f"{count} model(s), 0 error(s), 0 warning(s)" not in run.stdout:
        raise SystemExit(f"validate_model_repo failed on the generated repository:\n{run.stdout[-3000:]}{run.stderr}")
    return elapsed


def sample(repository: Path, below: int) -> list[str]:
    """The model folders numbered below `below` (`<kind>-<nnnn>`, an ensemble's member with it)."""
    return sorted(p.name for p in repository.iterdir() if int(re.search(r"-(\d{4})", p.name).group(1)) < below)


def time_triton(repository: Path, models: list[str]) -> tuple[float, float, float] | None:
    """(whole run, median load per model, server start and stop); None without .venv-triton."""
    from model_repo_check.triton_engine import Status, check_with_triton
    from model_repo_check.tritonserver.server import TritonNotInstalledError

    start = time.perf_counter()
    try:
        report = check_with_triton(repository, models)
    except TritonNotInstalledError as err:
        print(f"triton engine: skipped ({err})")
        return None
    elapsed = time.perf_counter() - start
    bad = [str(v) for v in report.verdicts if v.status is not Status.OK]
    if bad or len(report.verdicts) != len(models):
        raise SystemExit(f"triton engine: {len(report.verdicts)} verdicts, not ok:\n" + "\n".join(bad[:20]))
    loads = [v.seconds for v in report.verdicts]
    return elapsed, statistics.median(loads), elapsed - sum(loads)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--triton-sample", type=int, default=50, help="models numbered below this (0: no triton)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-validate-") as tmp:
        repository = Path(tmp) / "repository"
        started = time.perf_counter()
        kinds = generate(repository, args.models)
        count = sum(1 for p in repository.iterdir() if p.is_dir())
        onnx_files = len(list(repository.glob("*/*/model.onnx")))
        print(
            f"corpus: {count} model folders, {onnx_files} ONNX files, "
            f"generated in {time.perf_counter() - started:.1f} s"
        )
        print("  " + ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items())) + " (each ensemble adds its member)")
        command = time_command(repository, count)
        rules = statistics.median(time_rules(repository, count) for _ in range(args.repeats))
        picked = sample(repository, args.triton_sample)
        triton = time_triton(repository, picked) if picked else None
    print(f"scripts/validate_model_repo on {count} models (new process, imports and all): {command:.2f} s")
    print(
        f"rules engine in process (validate_repository): {rules:.2f} s, {rules / count * 1000:.2f} ms per model "
        f"(median of {args.repeats})"
    )
    if triton is not None:
        total, per_model, overhead = triton
        print(
            f"triton engine on {len(picked)} of them: {total:.1f} s, {total / len(picked) * 1000:.0f} ms per model "
            f"in all (median load {per_model * 1000:.0f} ms; server start and stop {overhead:.1f} s); "
            f"{total / len(picked) / (rules / count):.0f}x the rules engine's time per model"
        )
    print(f"rules engine (command) against the {TARGET_S:.0f} s target: {command / TARGET_S:.2f} -> ", end="")
    print("PASS" if command < TARGET_S else "FAIL")
    return 0 if command < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
