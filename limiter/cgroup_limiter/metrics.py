"""Prometheus metrics, and the HTTP endpoint that serves /metrics and /healthz (port 9500)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

POD_LABELS = ("namespace", "pod")
IO_LABELS = ("namespace", "pod", "device", "direction")


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.io_limit = Gauge(
            "cgroup_limiter_pod_io_limit_bytes_per_second",
            "The rbps/wbps the agent has written to the pod's io.max (absent: unlimited)",
            IO_LABELS,
            registry=r,
        )
        self.throttled = Gauge(
            "cgroup_limiter_pod_throttled",
            "1 while the pod is adaptively throttled on that device",
            IO_LABELS,
            registry=r,
        )
        self.throttle_events = Counter(
            "cgroup_limiter_throttle_events",
            "Adaptive throttle transitions (action=throttle|release)",
            (*IO_LABELS, "action"),
            registry=r,
        )
        self.cpu_weight = Gauge("cgroup_limiter_pod_cpu_weight", "cpu.weight the agent applied", POD_LABELS, registry=r)
        self.cpu_max = Gauge(
            "cgroup_limiter_pod_cpu_max_cores", "cpu.max the agent applied, as quota/period", POD_LABELS, registry=r
        )
        self.scan_duration = Histogram(
            "cgroup_limiter_scan_duration_seconds",
            "Time of one scan of every pod cgroup",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=r,
        )
        self.errors = Counter("cgroup_limiter_errors", "Errors met and survived, by reason", ("reason",), registry=r)
        self.writes = Counter("cgroup_limiter_writes", "Writes to cgroup interface files", ("file",), registry=r)
        self.pod_cgroups = Gauge(
            "cgroup_limiter_pod_cgroups",
            "Pod cgroups seen in the last scan (state=managed|protected|unidentified)",
            ("state",),
            registry=r,
        )
        self.last_scan = Gauge(
            "cgroup_limiter_last_scan_timestamp_seconds", "Unix time of the last completed scan", registry=r
        )
        self.io_pressure = Gauge(
            "cgroup_limiter_io_pressure_some_avg10",
            "IO pressure, PSI some avg10 in percent: scope=node (node_pressure_file), "
            "scope=protected (the highest io.pressure of the protected pods: the contention signal)",
            ("scope",),
            registry=r,
        )
        self.contention = Gauge(
            "cgroup_limiter_contention", "1 while protected pods are under IO pressure: throttling allowed", registry=r
        )
        self.pressure_unavailable = Gauge(
            "cgroup_limiter_pressure_unavailable",
            "1 while the node's or a protected pod's IO pressure cannot be read (kernel without PSI)",
            registry=r,
        )
        self.pod_source_errors = Counter(
            "cgroup_limiter_pod_source_errors",
            "Kubernetes pod list/watch failures (reason=list|watch|gone: 410 Gone, relisted)",
            ("reason",),
            registry=r,
        )
        self.limit_latency = Histogram(
            "cgroup_limiter_limit_latency_seconds",
            "From a new pod cgroup's appearance to its static limits being in place",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0),
            registry=r,
        )
        self.inotify = Gauge(
            "cgroup_limiter_inotify",
            "1: new pod cgroups are seen through inotify; 0: only by the scan every interval",
            registry=r,
        )

    def forget_pod(self, namespace: str, pod: str, series: set[tuple[str, str]]) -> None:
        """Drop a vanished pod's series: device/direction pairs it had."""
        for device, direction in series:
            labels = (namespace, pod, device, direction)
            for gauge in (self.io_limit, self.throttled):
                with contextlib.suppress(KeyError):
                    gauge.remove(*labels)
            for action in ("throttle", "release"):
                with contextlib.suppress(KeyError):
                    self.throttle_events.remove(*labels, action)
        for gauge in (self.cpu_weight, self.cpu_max):
            with contextlib.suppress(KeyError):
                gauge.remove(namespace, pod)

    def expose_rates(self, samples: Callable[[], Iterable[tuple[str, str, str, str, float]]]) -> None:
        """Register the per-pod IO rates, read from the agent at scrape time."""
        self.registry.register(RateCollector(samples))


class RateCollector:
    """cgroup_limiter_pod_io_bytes_per_second, built when Prometheus scrapes: the scan only keeps
    the numbers, so the exposition costs once per scrape instead of once per pod per scan."""

    NAME = "cgroup_limiter_pod_io_bytes_per_second"
    HELP = "Pod IO rate over the last interval, from io.stat"

    def __init__(self, samples: Callable[[], Iterable[tuple[str, str, str, str, float]]]) -> None:
        self.samples = samples

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(self.NAME, self.HELP, labels=IO_LABELS)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.NAME, self.HELP, labels=IO_LABELS)
        for *labels, value in self.samples():
            family.add_metric(labels, value)
        yield family


def serve(metrics: Metrics, healthy: Callable[[], bool], address: str, port: int) -> ThreadingHTTPServer:
    """Start the endpoint in a daemon thread; `healthy()` decides /healthz (200 or 503)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                status, body, kind = 200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST
            elif path == "/healthz":
                ok = healthy()
                status, body, kind = (200, b"ok\n", "text/plain") if ok else (503, b"no recent scan\n", "text/plain")
            else:
                status, body, kind = 404, b"not found: try /metrics or /healthz\n", "text/plain"
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer((address, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
