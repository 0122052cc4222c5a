"""The drift agent's settings: command-line options, each with an environment variable (the
container sets those) and a default. `python -m serving.drift --help` lists them."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from serving.options import Option, env_parser

# The defaults, justified in serving/drift/README.md ("Thresholds"). monitoring/rules.py alerts
# on the same share (a unit test keeps the two equal).
WINDOW = 500  # newest sampled rows per model compared with the reference
MIN_ROWS = 200  # fewer live rows than this: no evaluation (too little power)
METHOD = "ks"  # Evidently's two-sample Kolmogorov-Smirnov test; its score is the p-value
THRESHOLD = 0.05  # a feature drifts when its p-value is below this
DRIFT_SHARE = 0.5  # the dataset drifts when at least this share of its features drift


@dataclass(frozen=True)
class Settings:
    gateway: str
    reference_dir: Path = Path("model_repository")
    host: str = "127.0.0.1"
    port: int = 8080
    interval: float = 30.0  # seconds between two pulls (and evaluations)
    window: int = WINDOW
    min_rows: int = MIN_ROWS
    method: str = METHOD
    threshold: float = THRESHOLD
    drift_share: float = DRIFT_SHARE
    timeout: float = 10.0  # each HTTP call to the gateway


# option -> (environment variable, type, help)
OPTIONS: dict[str, Option] = {
    "gateway": ("DRIFT_GATEWAY", str, "the gateway's base URL, e.g. http://127.0.0.1:8000 (required)"),
    "reference_dir": ("DRIFT_REFERENCE_DIR", Path, "model repository with <model>/drift_reference.csv"),
    "host": ("DRIFT_HOST", str, "address to listen on"),
    "port": ("DRIFT_PORT", int, "HTTP port of /metrics, /livez, /readyz"),
    "interval": ("DRIFT_INTERVAL", float, "seconds between two pulls and evaluations"),
    "window": ("DRIFT_WINDOW", int, "newest sampled rows kept per model (the live window)"),
    "min_rows": ("DRIFT_MIN_ROWS", int, "live rows needed before a model is evaluated"),
    "method": ("DRIFT_METHOD", str, "Evidently stat test of each feature (ks, wasserstein, psi, ...)"),
    "threshold": ("DRIFT_THRESHOLD", float, "the stat test's threshold (p-value for ks, distance for others)"),
    "drift_share": ("DRIFT_SHARE", float, "share of drifted features from which the dataset drifts"),
    "timeout": ("DRIFT_TIMEOUT", float, "seconds each HTTP call to the gateway may take"),
}


def parse(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    environ = os.environ if environ is None else environ
    defaults = Settings(gateway="")
    parser = env_parser(
        "python -m serving.drift",
        "Drift agent: gateway samples vs the release's reference window, as Prometheus metrics.",
        OPTIONS,
        defaults,
        environ,
    )
    args = parser.parse_args(argv)
    if not args.gateway:
        parser.error("--gateway (or DRIFT_GATEWAY) is required")
    if not 0 < args.drift_share <= 1:
        parser.error(f"--drift-share must be in (0, 1], got {args.drift_share}")
    if not 1 <= args.min_rows <= args.window:
        parser.error(f"--min-rows must be between 1 and --window ({args.window}), got {args.min_rows}")
    if args.interval <= 0:
        parser.error(f"--interval must be positive, got {args.interval}")
    return Settings(**{**vars(args), "gateway": args.gateway.rstrip("/")})
