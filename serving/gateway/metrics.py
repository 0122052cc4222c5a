"""The gateway's Prometheus metrics (names prefixed `gateway_`), in a registry of its own: the
edge golden signals per model (traffic and errors by HTTP code, latency, in-flight requests,
rejections), Triton's readiness as the gateway sees it, and the drift sample buffer."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Seconds; fine below 10 ms, where the gateway's own overhead shows.
LATENCY_BUCKETS = (0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


REJECTION_REASONS = ("overloaded", "triton_overloaded", "model_not_ready", "triton_not_ready", "triton_unreachable")


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "gateway_requests",
            "Requests answered, by model and HTTP status code.",
            ["model", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "gateway_request_duration_seconds",
            "Time from the request's arrival to its answer, by model and HTTP status code (the latency SLO"
            " counts the 2xx).",
            ["model", "code"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.upstream_latency = Histogram(
            "gateway_triton_request_duration_seconds",
            "Time of the gRPC inference call to Triton, by model (the rest of the latency is the gateway's).",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "gateway_requests_in_flight",
            "Requests admitted and not yet answered, by model.",
            ["model"],
            registry=self.registry,
        )
        self.rejections = Counter(
            "gateway_rejections",
            "Requests refused, by model and reason: overloaded (429, the gateway's bound), triton_overloaded (429,"
            " the model's queue at Triton), model_not_ready (503), triton_not_ready and triton_unreachable (503).",
            ["model", "reason"],
            registry=self.registry,
        )
        self.triton_ready = Gauge(
            "gateway_triton_ready",
            "1 while the readiness probe reaches Triton and finds its server ready, else 0 (models apart).",
            registry=self.registry,
        )
        self.model_ready = Gauge(
            "gateway_model_ready",
            "1 while the readiness probe finds the model ready at Triton, else 0; its requests get 503 meanwhile.",
            ["model"],
            registry=self.registry,
        )
        self.samples_dropped = Counter(
            "gateway_drift_samples_dropped",
            "Sampled drift rows pushed out of a full buffer before the drift agent drained them, by model.",
            ["model"],
            registry=self.registry,
        )

    def prepare(self, models: list[str]) -> None:
        """Series of every model at zero from the start, so rates and ratios exist before traffic."""
        for model in models:
            self.latency.labels(model, "200")
            self.upstream_latency.labels(model)
            self.in_flight.labels(model)
            self.samples_dropped.labels(model)
            self.model_ready.labels(model).set(0)
            for reason in REJECTION_REASONS:
                self.rejections.labels(model, reason)
