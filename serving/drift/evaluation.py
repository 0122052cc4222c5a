"""One drift evaluation: the live window against the reference window, per feature, with
Evidently's drift tests (evidently 0.7's Report API: a ValueDrift metric per feature and
DriftedColumnsCount, run with include_tests=True). The verdicts are Evidently's own tests:
a feature drifts when its ValueDrift test fails; the dataset drifts when the test on the share
of drifted columns (share < drift_share) fails."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from evidently import DataDefinition, Dataset, Report
from evidently.metrics import DriftedColumnsCount, ValueDrift


@dataclass(frozen=True)
class FeatureDrift:
    score: float  # the stat test's score: the p-value for ks, a distance for wasserstein, psi, ...
    drifted: bool


@dataclass(frozen=True)
class DriftResult:
    features: dict[str, FeatureDrift]
    drifted_count: int
    drifted_share: float
    dataset_drift: bool
    current_rows: int
    reference_rows: int


class EvaluationError(RuntimeError):
    pass


def _dataset(names: Sequence[str], rows: Sequence[Sequence[float]]) -> Dataset:
    frame = pd.DataFrame(list(rows), columns=list(names), dtype="float64")
    return Dataset.from_pandas(frame, data_definition=DataDefinition(numerical_columns=list(names)))


def _status(tests: list[dict[str, Any]], metric_id: str) -> str:
    statuses = [test["status"] for test in tests if test["metric_config"]["metric_id"] == metric_id]
    if len(statuses) != 1:
        raise EvaluationError(f"Evidently returned {len(statuses)} tests for metric {metric_id}, expected 1")
    return statuses[0]


def evaluate(
    names: Sequence[str],
    reference: Sequence[Sequence[float]],
    current: Sequence[Sequence[float]],
    *,
    method: str,
    threshold: float,
    drift_share: float,
) -> DriftResult:
    count = DriftedColumnsCount(columns=list(names), method=method, threshold=threshold, drift_share=drift_share)
    per_feature = {name: ValueDrift(column=name, method=method, threshold=threshold) for name in names}
    report = Report([count, *per_feature.values()], include_tests=True)
    snapshot = report.run(_dataset(names, current), _dataset(names, reference)).dict()
    by_id = {metric["id"]: metric for metric in snapshot["metrics"]}
    ids = {metric["config"].get("column"): metric["id"] for metric in snapshot["metrics"]}
    tests = snapshot["tests"]
    features = {}
    for name in names:
        metric_id = ids[name]
        features[name] = FeatureDrift(float(by_id[metric_id]["value"]), _status(tests, metric_id) == "FAIL")
    count_id = next(metric["id"] for metric in snapshot["metrics"] if "drift_share" in metric["config"])
    value = by_id[count_id]["value"]
    return DriftResult(
        features=features,
        drifted_count=int(value["count"]),
        drifted_share=float(value["share"]),
        dataset_drift=_status(tests, count_id) == "FAIL",
        current_rows=len(current),
        reference_rows=len(reference),
    )
