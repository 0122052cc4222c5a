"""The node-level config file (YAML); every error names the file and the key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cgroup_limiter.iofiles import IoFileError, IoLimit, parse_cpu_max, parse_cpu_weight
from cgroup_limiter.quantities import QuantityError, parse_bytes, parse_limit

ON_EXIT_CHOICES = ("keep", "remove")


class ConfigError(ValueError):
    def __init__(self, path: Path | str, key: str, reason: str) -> None:
        super().__init__(f"{path}: {key or '<top level>'}: {reason}")


CONTENTION = "contention"
THRESHOLD = "threshold"
MODES = (CONTENTION, THRESHOLD)


@dataclass(frozen=True)
class Band:
    """Hysteresis: `trigger` scans in a row above `high` turn it on, `calm` scans below `low` off."""

    high: float
    low: float
    trigger: int
    calm: int


@dataclass(frozen=True)
class AdaptiveSettings:
    """Adaptive IO throttling, in one of two modes.

    contention (default): while the protected pods' IO pressure (io.pressure `some avg10`) is
    above `pressure_some_avg10` for `trigger_intervals` scans, the heaviest `max_throttled`
    unprotected pods per device and direction (io.stat rate >= `min_rate_bps`) are capped at
    `ceiling_bps`; all are lifted after `calm_intervals` scans below `release_some_avg10`.
    threshold: a pod's own rate above `threshold_bps` for `trigger_intervals` scans caps it at
    `ceiling_bps`; `calm_intervals` scans below `release_bps` (< ceiling) lift it.
    """

    enabled: bool = True
    mode: str = CONTENTION
    pressure_some_avg10: float = 10.0
    release_some_avg10: float = 2.0
    min_rate_bps: int = 1_000_000
    max_throttled: int = 3
    threshold_bps: int = 100_000_000
    release_bps: int = 25_000_000
    ceiling_bps: int = 50_000_000
    trigger_intervals: int = 2
    calm_intervals: int = 5
    devices: tuple[str, ...] = ()

    def rate_band(self) -> Band:
        return Band(self.threshold_bps, self.release_bps, self.trigger_intervals, self.calm_intervals)

    def pressure_band(self) -> Band:
        return Band(self.pressure_some_avg10, self.release_some_avg10, self.trigger_intervals, self.calm_intervals)

    def check(self) -> str | None:
        """Why these settings cannot work in their mode, or None."""
        if self.mode == THRESHOLD:
            if self.ceiling_bps > self.threshold_bps:
                return f"ceiling_bps {self.ceiling_bps} is above threshold_bps {self.threshold_bps}"
            if self.release_bps >= self.ceiling_bps:
                return (
                    f"release_bps {self.release_bps} must be below ceiling_bps {self.ceiling_bps}, "
                    "or a throttled pod running at the ceiling would be released and throttled again"
                )
            return None
        if self.release_some_avg10 >= self.pressure_some_avg10:
            return (
                f"release_some_avg10 {self.release_some_avg10} must be below pressure_some_avg10 "
                f"{self.pressure_some_avg10} (hysteresis)"
            )
        if self.min_rate_bps >= self.ceiling_bps:
            return (
                f"min_rate_bps {self.min_rate_bps} must be below ceiling_bps {self.ceiling_bps}, "
                "or a pod pushing at the ceiling would count as calm and be released"
            )
        return None


@dataclass(frozen=True)
class ProtectSelector:
    """Matches a pod when every given label matches and its namespace is listed (if any are)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    namespaces: frozenset[str] = frozenset()

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if self.namespaces and namespace not in self.namespaces:
            return False
        return all(labels.get(key) == value for key, value in self.labels.items())


@dataclass(frozen=True)
class StaticLimits:
    io_max: Mapping[str, IoLimit] = field(default_factory=dict)
    cpu_weight: int | None = None
    cpu_max: str | None = None


@dataclass(frozen=True)
class NodeConfig:
    interval_seconds: float = 1.0
    resync_intervals: int = 60
    state_file: Path | None = None
    on_exit: str = "keep"
    sysfs_root: Path = Path("/sys")
    metrics_address: str = "0.0.0.0"
    metrics_port: int = 9500
    node_pressure_file: Path = Path("/proc/pressure/io")
    protect: tuple[ProtectSelector, ...] = ()
    defaults: StaticLimits = StaticLimits()
    adaptive: AdaptiveSettings = AdaptiveSettings()


class _Reader:
    def __init__(self, path: Path | str) -> None:
        self.path = path

    def fail(self, key: str, reason: str) -> ConfigError:
        return ConfigError(self.path, key, reason)

    def mapping(self, value: Any, key: str, allowed: set[str]) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(key, f"expected a mapping, got {type(value).__name__}")
        unknown = sorted(set(value) - allowed)
        if unknown:
            raise self.fail(
                f"{key}.{unknown[0]}" if key else unknown[0], f"unknown key (known: {', '.join(sorted(allowed))})"
            )
        return value

    def number(self, value: Any, key: str, minimum: float, integer: bool) -> Any:
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or value < minimum:
            kind = "an integer" if integer else "a number"
            raise self.fail(key, f"expected {kind} >= {minimum}, got {value!r}")
        return value

    def rate(self, value: Any, key: str) -> int:
        try:
            return parse_bytes(value)
        except QuantityError as error:
            raise self.fail(key, str(error)) from None

    def strings(self, value: Any, key: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, f"expected a list of strings, got {value!r}")
        return tuple(value)


def _adaptive(reader: _Reader, raw: Any) -> AdaptiveSettings:
    base = AdaptiveSettings()
    data = reader.mapping(raw, "adaptive", {f for f in AdaptiveSettings.__dataclass_fields__})
    values: dict[str, Any] = {}
    for key, value in data.items():
        where = f"adaptive.{key}"
        if key == "enabled":
            if not isinstance(value, bool):
                raise reader.fail(where, f"expected true or false, got {value!r}")
            values[key] = value
        elif key == "mode":
            if value not in MODES:
                raise reader.fail(where, f"expected one of {', '.join(MODES)}, got {value!r}")
            values[key] = value
        elif key.endswith("_avg10"):
            number = reader.number(value, where, 0, integer=False)
            if number > 100:
                raise reader.fail(where, f"a pressure is a percentage (0..100), got {value!r}")
            values[key] = float(number)
        elif key.endswith("_bps"):
            values[key] = reader.rate(value, where)
        elif key.endswith("_intervals") or key == "max_throttled":
            values[key] = reader.number(value, where, 1, integer=True)
        else:
            values[key] = reader.strings(value, where)
    old_keys = sorted({"threshold_bps", "release_bps"} & set(data))
    if old_keys and "mode" not in data:
        raise reader.fail(
            "adaptive.mode",
            f"{' and '.join(old_keys)} belong to mode: threshold, and the default mode is now contention; "
            "set mode: threshold (throttle by a pod's own rate) or mode: contention (throttle under IO pressure)",
        )
    settings = AdaptiveSettings(**{**base.__dict__, **values})
    problem = settings.check()
    if problem:
        raise reader.fail("adaptive", problem)
    return settings


def _static(reader: _Reader, raw: Any) -> StaticLimits:
    data = reader.mapping(raw, "defaults", {"io_max", "cpu_weight", "cpu_max"})
    io_max: dict[str, IoLimit] = {}
    devices = reader.mapping(data.get("io_max"), "defaults.io_max", set(data.get("io_max") or {}))
    for device, fields in devices.items():
        where = f"defaults.io_max.{device}"
        if not isinstance(fields, Mapping):
            raise reader.fail(where, "expected a mapping of rbps/wbps/riops/wiops")
        try:
            io_max[str(device)] = parse_limit(dict(fields))
        except QuantityError as error:
            raise reader.fail(where, str(error)) from None
    try:
        weight = None if data.get("cpu_weight") is None else parse_cpu_weight(str(data["cpu_weight"]))
        cpu_max = None if data.get("cpu_max") is None else parse_cpu_max(str(data["cpu_max"]))
    except IoFileError as error:
        raise reader.fail("defaults", str(error)) from None
    return StaticLimits(io_max=io_max, cpu_weight=weight, cpu_max=cpu_max)


def _protect(reader: _Reader, raw: Any) -> tuple[ProtectSelector, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise reader.fail("protect", "expected a list of selectors ({labels: {...}, namespaces: [...]})")
    selectors = []
    for index, item in enumerate(raw):
        where = f"protect.{index}"
        data = reader.mapping(item, where, {"labels", "namespaces"})
        if not data:
            raise reader.fail(where, "an empty selector would protect every pod; give labels or namespaces")
        labels = reader.mapping(data.get("labels"), f"{where}.labels", set(data.get("labels") or {}))
        if not all(isinstance(v, str) for v in labels.values()):
            raise reader.fail(f"{where}.labels", "label values must be strings")
        namespaces = reader.strings(data["namespaces"], f"{where}.namespaces") if "namespaces" in data else ()
        selectors.append(ProtectSelector(labels=dict(labels), namespaces=frozenset(namespaces)))
    return tuple(selectors)


def parse_config(raw: Any, path: Path | str) -> NodeConfig:
    reader = _Reader(path)
    allowed = {
        "interval_seconds",
        "resync_intervals",
        "state_file",
        "on_exit",
        "sysfs_root",
        "node_pressure_file",
        "metrics",
        "protect",
        "defaults",
        "adaptive",
    }
    data = reader.mapping(raw, "", allowed)
    metrics = reader.mapping(data.get("metrics"), "metrics", {"address", "port"})
    on_exit = data.get("on_exit", "keep")
    if on_exit not in ON_EXIT_CHOICES:
        raise reader.fail("on_exit", f"expected one of {', '.join(ON_EXIT_CHOICES)}, got {on_exit!r}")
    port = reader.number(metrics.get("port", 9500), "metrics.port", 1, integer=True)
    if port > 65535:
        raise reader.fail("metrics.port", f"{port} is not a TCP port")
    state_file = data.get("state_file")
    if state_file is not None and not isinstance(state_file, str):
        raise reader.fail("state_file", f"expected a path, got {state_file!r}")
    pressure_file = data.get("node_pressure_file", "/proc/pressure/io")
    if not isinstance(pressure_file, str) or not pressure_file:
        raise reader.fail("node_pressure_file", f"expected a path, got {pressure_file!r}")
    return NodeConfig(
        interval_seconds=float(reader.number(data.get("interval_seconds", 1.0), "interval_seconds", 0.05, False)),
        resync_intervals=reader.number(data.get("resync_intervals", 60), "resync_intervals", 1, integer=True),
        state_file=Path(state_file) if state_file else None,
        on_exit=on_exit,
        sysfs_root=Path(str(data.get("sysfs_root", "/sys"))),
        metrics_address=str(metrics.get("address", "0.0.0.0")),
        metrics_port=port,
        node_pressure_file=Path(pressure_file),
        protect=_protect(reader, data.get("protect")),
        defaults=_static(reader, data.get("defaults")),
        adaptive=_adaptive(reader, data.get("adaptive")),
    )


def load_config(path: Path) -> NodeConfig:
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as error:
        raise ConfigError(path, "", f"cannot read: {error.strerror}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else ""
        raise ConfigError(path, where, f"not valid YAML: {error}") from None
    return parse_config(raw, path)
