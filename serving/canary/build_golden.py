"""Writes the golden set shipped with text-classifier: `model_repository/text-classifier/golden.csv`,
`python -m serving.canary.build_golden`. Deterministic: the same file each run.

The example text-classifier is not trained on anything: model_repo_check/example_models.py draws
its weights from numpy's seeded RandomState (version 1: seed 1, version 2: seed 2). There is no
data set and no labelling behind it, so no golden set can be "the data the model learned". Version
2 is not a retrain of version 1 either: it is an independent draw, and on standard-normal
embeddings the two agree on 25 % of inputs, which is chance for four classes.

Labels taken from either version's argmax would only measure agreement with that version (the
stable one scoring 100 % by construction), so the golden set declares its own labelled world,
independent of both versions' weights and seeded separately: embeddings from the project's
unshifted input distribution (standard normal, as the drift reference and the lab's load), and
each label the class whose direction in a fixed random linear map scores highest. Against it
both example versions score near chance (their accuracies are printed by this script and by the
golden program); what the golden set proves is the comparison, canary against stable on the same
labelled inputs, not that the example model is good. A real release ships the labelled
validation rows it was accepted on in the same format.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

from model_repo_check.example_models import TEXT_FEATURES, TEXT_LABELS

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"
MODEL = "text-classifier"
GOLDEN_FILE = "golden.csv"
ROWS = 1000
SEED = 20261217  # not the drift reference's (20261216): different rows


def golden_rows(rows: int = ROWS, seed: int = SEED) -> tuple[np.ndarray, list[str]]:
    """(embeddings float32 [rows, 32], labels) of the declared world."""
    rng = np.random.default_rng(seed)
    world = rng.standard_normal((TEXT_FEATURES, len(TEXT_LABELS)))
    embeddings = rng.standard_normal((rows, TEXT_FEATURES)).astype(np.float32)
    classes = (embeddings.astype(np.float64) @ world).argmax(axis=1)
    return embeddings, [TEXT_LABELS[index] for index in classes]


def write_golden(target: Path, rows: int = ROWS) -> None:
    embeddings, labels = golden_rows(rows)
    with target.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow([*(f"embedding_{index}" for index in range(TEXT_FEATURES)), "label"])
        # 9 significant digits give back every float32 exactly.
        writer.writerows(
            [*(f"{value:.9g}" for value in row), label] for row, label in zip(embeddings, labels, strict=True)
        )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m serving.canary.build_golden", description=__doc__)
    parser.add_argument("--repository", type=Path, default=REPOSITORY)
    args = parser.parse_args()
    target = args.repository / MODEL / GOLDEN_FILE
    write_golden(target)
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
