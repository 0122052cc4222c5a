"""The agent's Prometheus metrics, all named model_drift_*, on their own registry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge

if TYPE_CHECKING:  # evaluation imports Evidently (seconds); monitoring/metric_names.py reads this module
    from serving.drift.evaluation import DriftResult


class DriftMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.feature_score = Gauge(
            "model_drift_feature_score",
            "The stat test's drift score of one feature at the last evaluation (ks: the p-value)",
            ["model", "feature", "method"],
            registry=r,
        )
        self.feature_drifted = Gauge(
            "model_drift_feature_drifted",
            "1 when Evidently's drift test of the feature failed at the last evaluation",
            ["model", "feature"],
            registry=r,
        )
        self.drifted_share = Gauge(
            "model_drift_drifted_features_share",
            "Share of the model's drift features that drifted at the last evaluation",
            ["model"],
            registry=r,
        )
        self.drifted_count = Gauge(
            "model_drift_drifted_features", "Drift features that drifted at the last evaluation", ["model"], registry=r
        )
        self.dataset_drift = Gauge(
            "model_drift_dataset_drift",
            "1 when Evidently's share-of-drifted-features test failed at the last evaluation",
            ["model"],
            registry=r,
        )
        self.window_rows = Gauge("model_drift_window_rows", "Rows in the live window", ["model"], registry=r)
        self.evaluated_rows = Gauge(
            "model_drift_evaluated_rows", "Live rows the last evaluation compared", ["model"], registry=r
        )
        self.reference_rows = Gauge("model_drift_reference_rows", "Rows of the reference window", ["model"], registry=r)
        self.last_evaluation = Gauge(
            "model_drift_last_evaluation_timestamp_seconds",
            "Unix time of the last successful evaluation",
            ["model"],
            registry=r,
        )
        self.evaluated_samples = Gauge(
            "model_drift_last_evaluation_samples",
            "model_drift_samples_total when the last evaluation's window was taken: the evaluation is"
            " current when the two are equal",
            ["model"],
            registry=r,
        )
        self.evaluation_seconds = Gauge(
            "model_drift_evaluation_duration_seconds", "How long the last evaluation took", ["model"], registry=r
        )
        self.evaluations = Counter("model_drift_evaluations", "Successful drift evaluations", ["model"], registry=r)
        self.samples = Counter("model_drift_samples", "Sampled rows pulled from the gateway", ["model"], registry=r)
        self.errors = Counter(
            "model_drift_errors",
            "Failed steps: pull (gateway unreachable or bad answer), features (names differ from the"
            " reference), evaluate (Evidently failed)",
            ["model", "stage"],
            registry=r,
        )

    def start(self, model: str, reference_rows: int) -> None:
        """Series that exist from the start, so that rate() and absent() see them before anything happens."""
        self.reference_rows.labels(model).set(reference_rows)
        self.window_rows.labels(model).set(0)
        self.evaluations.labels(model)
        self.samples.labels(model)
        for stage in ("pull", "features", "evaluate"):
            self.errors.labels(model, stage)

    def publish(self, model: str, method: str, result: DriftResult, samples: int, at: float, seconds: float) -> None:
        for feature, drift in result.features.items():
            self.feature_score.labels(model, feature, method).set(drift.score)
            self.feature_drifted.labels(model, feature).set(int(drift.drifted))
        self.drifted_share.labels(model).set(result.drifted_share)
        self.drifted_count.labels(model).set(result.drifted_count)
        self.dataset_drift.labels(model).set(int(result.dataset_drift))
        self.evaluated_rows.labels(model).set(result.current_rows)
        self.evaluated_samples.labels(model).set(samples)
        self.last_evaluation.labels(model).set(at)
        self.evaluation_seconds.labels(model).set(seconds)
        self.evaluations.labels(model).inc()
