"""A pod's policy: the node config's defaults, overridden by the pod's annotations."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

from cgroup_limiter.config import MODES, AdaptiveSettings, NodeConfig
from cgroup_limiter.iofiles import IoFileError, IoLimit, parse_cpu_max, parse_cpu_weight
from cgroup_limiter.pods import PodInfo
from cgroup_limiter.quantities import QuantityError, parse_bytes, parse_io_max_spec

PREFIX = "limiter.gpu-serving.io/"
PROTECTED = PREFIX + "protected"
IO_MAX = PREFIX + "io-max"
CPU_WEIGHT = PREFIX + "cpu-weight"
CPU_MAX = PREFIX + "cpu-max"
ADAPTIVE = PREFIX + "adaptive"
ADAPTIVE_MODE = PREFIX + "adaptive-mode"
ADAPTIVE_THRESHOLD = PREFIX + "adaptive-threshold"
ADAPTIVE_CEILING = PREFIX + "adaptive-ceiling"
ADAPTIVE_RELEASE = PREFIX + "adaptive-release"
T = TypeVar("T")
ANNOTATIONS = (
    PROTECTED,
    IO_MAX,
    CPU_WEIGHT,
    CPU_MAX,
    ADAPTIVE,
    ADAPTIVE_MODE,
    ADAPTIVE_THRESHOLD,
    ADAPTIVE_CEILING,
    ADAPTIVE_RELEASE,
)


@dataclass(frozen=True)
class PodPolicy:
    protected: bool
    io_max: Mapping[str, IoLimit] = field(default_factory=dict)  # device spec (name or MAJ:MIN) -> limit
    cpu_weight: int | None = None
    cpu_max: str | None = None
    adaptive: AdaptiveSettings | None = None  # None: not adaptively throttled
    errors: tuple[str, ...] = ()  # annotations that were ignored, and why


def _flag(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"expected 'true' or 'false', got {value!r}")
    return lowered == "true"


def _mode(value: str) -> str:
    if value.strip() not in MODES:
        raise ValueError(f"expected one of {', '.join(MODES)}, got {value!r}")
    return value.strip()


def pod_policy(pod: PodInfo, config: NodeConfig) -> PodPolicy:
    """Protected pods (by a config selector or the annotation) get no limits at all: a pod
    cannot un-protect itself by annotation when the node config protects it."""
    notes = pod.annotations
    errors: list[str] = []

    def read(key: str, parse: Callable[[str], T]) -> T | None:
        if key not in notes:
            return None
        try:
            return parse(notes[key])
        except (ValueError, QuantityError, IoFileError) as error:
            errors.append(f"pod {pod.namespace}/{pod.name}: annotation {key}: {error}; ignored")
            return None

    unknown = sorted(k for k in notes if k.startswith(PREFIX) and k not in ANNOTATIONS)
    errors.extend(f"pod {pod.namespace}/{pod.name}: unknown annotation {k}; ignored" for k in unknown)
    by_selector = any(selector.matches(pod.namespace, pod.labels) for selector in config.protect)
    if by_selector or read(PROTECTED, _flag):
        return PodPolicy(protected=True, errors=tuple(errors))

    io_max = dict(config.defaults.io_max)
    io_max.update(read(IO_MAX, parse_io_max_spec) or {})
    weight = read(CPU_WEIGHT, parse_cpu_weight)
    cpu_max = read(CPU_MAX, parse_cpu_max)

    adaptive: AdaptiveSettings | None = config.adaptive
    enabled = read(ADAPTIVE, _flag)
    if enabled is False or (enabled is None and not config.adaptive.enabled):
        adaptive = None
    else:
        overrides: dict[str, int | str] = {}
        mode = read(ADAPTIVE_MODE, _mode)
        if mode is not None:
            overrides["mode"] = mode
        for key, name in (
            (ADAPTIVE_THRESHOLD, "threshold_bps"),
            (ADAPTIVE_CEILING, "ceiling_bps"),
            (ADAPTIVE_RELEASE, "release_bps"),
        ):
            value = read(key, parse_bytes)
            if value is not None:
                overrides[name] = value
        candidate = replace(config.adaptive, enabled=True, **overrides)
        problem = candidate.check()
        if problem:
            errors.append(f"pod {pod.namespace}/{pod.name}: adaptive annotations: {problem}; node settings used")
            candidate = replace(config.adaptive, enabled=True)
        adaptive = candidate
    return PodPolicy(
        protected=False,
        io_max=io_max,
        cpu_weight=weight if weight is not None else config.defaults.cpu_weight,
        cpu_max=cpu_max if cpu_max is not None else config.defaults.cpu_max,
        adaptive=adaptive,
        errors=tuple(errors),
    )
