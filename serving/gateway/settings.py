"""The gateway's settings: command-line options, each with an environment variable (the
container sets those) and a default. `python -m serving.gateway --help` lists them."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from serving.options import Option, env_parser

MAPPINGS = Path(__file__).resolve().parent / "mappings"


@dataclass(frozen=True)
class Settings:
    triton_grpc: str
    host: str = "127.0.0.1"
    port: int = 8000
    model_repository: Path = Path("model_repository")
    mappings: Path = MAPPINGS
    deadline_ms: float = 1000  # from a request's arrival to its answer; Triton gets what is left
    max_body_bytes: int = 1 << 20  # larger bodies get 413 before they are parsed
    max_concurrency: int = 64  # requests at Triton at once
    max_queue: int = 256  # requests waiting for one of those slots; beyond: 429
    # An idle client connection stays open this long: above the callers' own idle timeout (the
    # mesh's, pulumi's GATEWAY_IDLE_TIMEOUT), so that the caller closes it first. When the server
    # closes first, a request sent on the closing connection meets a reset (uvicorn's default, 5 s,
    # equals httpx's and races it).
    keep_alive_s: int = 75
    probe_period_s: float = 1.0  # Triton readiness probe
    probe_timeouts: int = 3  # slow probes in a row before Triton counts as not ready
    grpc_channels: int = 2
    sample_rate: float = 1.0  # share of successful requests whose drift features are kept
    sample_buffer: int = 1024  # rows kept per model until the drift agent drains them
    log_level: str = "warning"


# option -> (environment variable, type, help)
OPTIONS: dict[str, Option] = {
    "triton_grpc": ("GATEWAY_TRITON_GRPC", str, "Triton's gRPC endpoint, HOST:PORT (required)"),
    "host": ("GATEWAY_HOST", str, "address to listen on"),
    "port": ("GATEWAY_PORT", int, "HTTP port"),
    "model_repository": ("GATEWAY_MODEL_REPOSITORY", Path, "the model repository's configs (config.pbtxt)"),
    "mappings": ("GATEWAY_MAPPINGS", Path, "folder of <model>.yml mapping files"),
    "deadline_ms": (
        "GATEWAY_DEADLINE_MS",
        float,
        "deadline of a request from its arrival (504 past it); Triton's call gets the time left",
    ),
    "max_body_bytes": ("GATEWAY_MAX_BODY_BYTES", int, "largest request body accepted (413 beyond, before parsing)"),
    "max_concurrency": ("GATEWAY_MAX_CONCURRENCY", int, "inference calls at Triton at once"),
    "max_queue": ("GATEWAY_MAX_QUEUE", int, "requests waiting for a call slot; more are refused with 429"),
    "keep_alive_s": (
        "GATEWAY_KEEP_ALIVE_S",
        int,
        "seconds an idle client connection stays open; keep it above the callers' idle timeout",
    ),
    "probe_period_s": ("GATEWAY_PROBE_PERIOD_S", float, "seconds between Triton readiness probes"),
    "probe_timeouts": (
        "GATEWAY_PROBE_TIMEOUTS",
        int,
        "probes in a row that Triton answers too late before it counts as not ready (a refused connection: at once)",
    ),
    "grpc_channels": ("GATEWAY_GRPC_CHANNELS", int, "gRPC channels to Triton, used round-robin"),
    "sample_rate": ("GATEWAY_SAMPLE_RATE", float, "share of answered requests sampled for drift (0 to 1)"),
    "sample_buffer": ("GATEWAY_SAMPLE_BUFFER", int, "drift rows kept per model until drained"),
    "log_level": ("GATEWAY_LOG_LEVEL", str, "uvicorn's log level"),
}


def parse(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    environ = os.environ if environ is None else environ
    defaults = Settings(triton_grpc="")
    parser = env_parser(
        "python -m serving.gateway",
        "HTTP gateway in front of Triton: business JSON in, tensors over gRPC, business JSON out.",
        OPTIONS,
        defaults,
        environ,
    )
    args = parser.parse_args(argv)
    if not args.triton_grpc:
        parser.error("--triton-grpc (or GATEWAY_TRITON_GRPC) is required")
    for name in ("max_body_bytes", "probe_timeouts", "keep_alive_s"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not 0 <= args.sample_rate <= 1:
        parser.error(f"--sample-rate must be between 0 and 1, got {args.sample_rate}")
    return Settings(**vars(args))
