"""How long scripts/validate_model_repo takes on a generated repository of 50 models (target: < 10 s).

The 50 models are copies of the two examples under new names (half batching classifiers with
two versions, half fixed-shape preprocessors), so every check runs, smoke inference included.
Times come from one run of this script: the whole command (interpreter, imports and all) on
50 models and on 1 model, so the ratio between them shows the cost per model.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "model_repository"
SCRIPT = ROOT / "scripts/validate_model_repo"
TARGET_S = 10.0
BASES = ("text-classifier", "image-preprocess")


def generate(repository: Path, count: int) -> None:
    repository.mkdir(parents=True)
    for i in range(count):
        base = BASES[i % len(BASES)]
        name = f"{base}-{i:03d}"
        shutil.copytree(EXAMPLES / base, repository / name)
        config = repository / name / "config.pbtxt"
        config.write_text(config.read_text().replace(f'name: "{base}"', f'name: "{name}"'))


def time_command(repository: Path, count: int, repeats: int) -> float:
    """Median wall time of the full command; it must also come back clean with every model seen."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run = subprocess.run([sys.executable, str(SCRIPT), str(repository), "--strict"], capture_output=True, text=True)
        samples.append(time.perf_counter() - start)
        if run.returncode != 0 or f"{count} model(s), 0 error(s), 0 warning(s)" not in run.stdout:
            raise SystemExit(f"validation of the generated repository failed:\n{run.stdout}{run.stderr}")
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-validate-") as tmp:
        big, one = Path(tmp) / "many", Path(tmp) / "one"
        generate(big, args.models)
        generate(one, 1)
        t_one = time_command(one, 1, args.repeats)
        t_big = time_command(big, args.models, args.repeats)
    per_model = (t_big - t_one) / (args.models - 1)
    print(f"validate {args.models} models: {t_big:.2f} s (median of {args.repeats}, whole command)")
    print(f"validate 1 model:   {t_one:.2f} s (start-up and imports dominate)")
    print(f"ratio {args.models} models / 1 model: {t_big / t_one:.2f}x")
    print(f"cost per extra model: {per_model * 1000:.0f} ms")
    print(f"ratio to the {TARGET_S:.0f} s target: {t_big / TARGET_S:.2f} -> {'PASS' if t_big < TARGET_S else 'FAIL'}")
    return 0 if t_big < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
