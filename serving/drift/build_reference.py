"""Writes the reference windows shipped with the example models' release:
`model_repository/<model>/drift_reference.csv`, `python -m serving.drift.build_reference`.

A real release takes its reference window from the validation data the model was accepted on;
the example models have none, so the window is REFERENCE_ROWS requests drawn, seeded, from the
input distribution the project's tests call unshifted (the same draws as tests/serving_lab:
standard normal embeddings, uniformly random 8-bit images). Each request becomes its drift
features with the gateway's own code (serving.gateway.features and the mapping files), so the
names and values are exactly those the gateway samples. Deterministic: the same files each run.
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from serving.drift.reference import REFERENCE_FILE
from serving.gateway.features import features
from serving.gateway.mapping import ModelMapping, load_mappings
from serving.gateway.settings import MAPPINGS

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"
REFERENCE_ROWS = 1000
SEED = 20261216

Inputs = dict[str, np.ndarray]  # business field -> one request's array, in the tensor's dtype


def _text(rng: np.random.Generator) -> Inputs:
    return {"embedding": rng.standard_normal(32).astype(np.float32)}


def _image(rng: np.random.Generator) -> Inputs:
    return {"image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)}


UNSHIFTED: dict[str, Callable[[np.random.Generator], Inputs]] = {"text-classifier": _text, "image-preprocess": _image}


def unshifted_inputs(model: str, count: int, seed: int = SEED) -> Iterator[Inputs]:
    """The first `count` requests of the reference window of `model`, as the gateway decodes them."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        yield UNSHIFTED[model](rng)


def reference_rows(mapping: ModelMapping, count: int = REFERENCE_ROWS) -> list[list[float]]:
    return [features(mapping, inputs) for inputs in unshifted_inputs(mapping.model, count)]


def write_reference(mapping: ModelMapping, target: Path, count: int = REFERENCE_ROWS) -> None:
    # 9 significant digits give back every float32 exactly (the embedding) and the channel
    # statistics to 1e-9 relative.
    with target.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(mapping.feature_names)
        writer.writerows([f"{value:.9g}" for value in row] for row in reference_rows(mapping, count))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m serving.drift.build_reference", description=__doc__)
    parser.add_argument("--repository", type=Path, default=REPOSITORY)
    parser.add_argument("--mappings", type=Path, default=MAPPINGS)
    args = parser.parse_args()
    mappings = load_mappings(args.mappings, args.repository)
    for model in sorted(UNSHIFTED):
        target = args.repository / model / REFERENCE_FILE
        write_reference(mappings[model], target)
        print(f"wrote {target}")


if __name__ == "__main__":
    main()
