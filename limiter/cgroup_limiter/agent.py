"""The scan loop: discover pod cgroups, measure io.stat, decide limits, write what changed.

Files the agent owns, per pod-level cgroup: io.max (the device lines it set), cpu.weight and
cpu.max (only where a policy sets them). It writes a file only when the value it wants differs
from the value it recorded (and, on first sight and every `resync_intervals` scans, from the
value actually in the file), and records what it set in the state file.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cgroup_limiter.adaptive import DIRECTIONS, RELEASE, THROTTLE, Trigger
from cgroup_limiter.config import AdaptiveSettings, NodeConfig
from cgroup_limiter.devices import DeviceResolver, UnknownDevice
from cgroup_limiter.discovery import PodCgroup, discover
from cgroup_limiter.iofiles import (
    UNLIMITED,
    IoCounters,
    IoFileError,
    IoLimit,
    format_io_max,
    merge_limits,
    parse_io_max,
    parse_io_stat,
)
from cgroup_limiter.metrics import Metrics
from cgroup_limiter.pods import PodInfo, PodSource, PodSourceError
from cgroup_limiter.policy import PodPolicy, pod_policy
from cgroup_limiter.state import PodRecord, StateFileError, load_state, save_state

log = logging.getLogger(__name__)

IO_MAX = "io.max"
_ZERO = IoCounters(0, 0)


def error_reason(error: OSError) -> str:
    """The errors-metric label for an OS error on a cgroup file."""
    return {
        errno.ENOENT: "vanished",
        errno.ENODEV: "unknown_device",
        errno.EACCES: "permission_denied",
        errno.EPERM: "permission_denied",
        errno.EROFS: "read_only",
        errno.EINVAL: "invalid_value",
    }.get(error.errno or 0, errno.errorcode.get(error.errno or 0, "os_error").lower())


def read_file(path: str) -> str:
    """One small interface file in one read(2): cheaper than open() with its text layer."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 1 << 16).decode()
    finally:
        os.close(fd)


@dataclass
class PodRuntime:
    cgroup: PodCgroup
    record: PodRecord = field(default_factory=PodRecord)
    info: PodInfo | None = None
    policy: PodPolicy | None = None
    triggers: dict[tuple[str, str], Trigger] = field(default_factory=dict)
    counters: dict[str, IoCounters] = field(default_factory=dict)
    sampled_at: float | None = None
    verified: bool = False
    series: set[tuple[str, str]] = field(default_factory=set)
    rates: dict[str, tuple[float, float]] = field(default_factory=dict)  # device -> (read, write) B/s
    exported: dict[str, str] | None = None  # record.applied as the limit metrics show it
    warned: set[str] = field(default_factory=set)


class Agent:
    def __init__(
        self,
        config: NodeConfig,
        source: PodSource,
        cgroup_root: Path,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.source = source
        self.root = cgroup_root
        self.metrics = metrics or Metrics()
        self.metrics.expose_rates(self._rate_samples)
        self.clock = clock
        self.devices = DeviceResolver(config.sysfs_root)
        self.pods: dict[str, PodRuntime] = {}
        self.scans = 0
        self.last_scan_at: float | None = None
        self._known: Mapping[str, PodInfo] = {}
        self._restored: dict[str, PodRecord] = {}
        self._dirty = False
        if config.state_file:
            try:
                self._restored = load_state(config.state_file)
            except StateFileError as error:
                self._count("state_file", str(error))
            log.info("state %s: %d pod(s) recorded", config.state_file, len(self._restored))

    # -- bookkeeping -------------------------------------------------------------------
    def _count(self, reason: str, message: str, pod: PodRuntime | None = None) -> None:
        self.metrics.errors.labels(reason).inc()
        if pod is None or reason not in pod.warned:
            log.warning("%s: %s", reason, message)
            if pod is not None:
                pod.warned.add(reason)
        else:
            log.debug("%s: %s", reason, message)

    def _label(self, pod: PodRuntime) -> tuple[str, str]:
        info = pod.info
        return (info.namespace, info.name) if info else ("", pod.cgroup.uid)

    def _write(self, pod: PodRuntime, name: str, value: str) -> None:
        fd = os.open(f"{pod.cgroup.path}/{name}", os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
        self.metrics.writes.labels(name).inc()
        log.info("%s/%s %s: wrote %r", *self._label(pod), name, value)

    # -- one scan ----------------------------------------------------------------------
    def scan(self) -> None:
        started = time.perf_counter()
        now = self.clock()
        self.devices.forget()
        cgroups = discover(self.root)
        if not cgroups and not self.root.is_dir():
            self._count("cgroup_root", f"{self.root} is not a directory")
        try:
            self._known = self.source.pods([c.uid for c in cgroups])
        except PodSourceError as error:
            self._count("pod_source", f"{error} (using the last answer)")
        counts = {"managed": 0, "protected": 0, "unidentified": 0}
        seen = set()
        for cgroup in cgroups:
            seen.add(cgroup.uid)
            pod = self.pods.get(cgroup.uid)
            if pod is None or pod.cgroup.path != cgroup.path:
                record = self._restored.pop(cgroup.uid, None) or PodRecord()
                pod = self.pods[cgroup.uid] = PodRuntime(cgroup, record)
                pod.triggers = {key: Trigger(throttled=True) for key in record.throttled}
            info = self._known.get(cgroup.uid)
            if info is None:
                counts["unidentified"] += 1  # never limit a pod we cannot check for protection
                continue
            try:
                self._scan_pod(pod, info, now)
            except OSError as error:
                self._count(error_reason(error), f"{cgroup.path}: {error.strerror}", pod)
            assert pod.policy is not None
            counts["protected" if pod.policy.protected else "managed"] += 1
        for uid in set(self.pods) - seen:
            self._forget(uid)
        if self._restored:
            log.info("state: %d recorded pod(s) are gone: %s", len(self._restored), ", ".join(sorted(self._restored)))
            self._restored.clear()
            self._dirty = True
        self.scans += 1
        self._save()
        for state, number in counts.items():
            self.metrics.pod_cgroups.labels(state).set(number)
        self.last_scan_at = now
        self.metrics.last_scan.set(time.time())
        self.metrics.scan_duration.observe(time.perf_counter() - started)

    def _forget(self, uid: str) -> None:
        pod = self.pods.pop(uid)
        self.metrics.forget_pod(*self._label(pod), pod.series)
        log.info("pod cgroup %s is gone", pod.cgroup.path)
        self._dirty = True

    def _scan_pod(self, pod: PodRuntime, info: PodInfo, now: float) -> None:
        if pod.info is not info:  # the same object while the source's answer is unchanged
            if pod.info != info or pod.policy is None:
                pod.policy = pod_policy(info, self.config)
                for message in pod.policy.errors:
                    self._count("annotation", message)
            pod.info = info
        policy = pod.policy
        assert policy is not None
        counters, bad = parse_io_stat(read_file(f"{pod.cgroup.path}/io.stat"))
        if bad:
            self._count("malformed_io_stat", f"{pod.cgroup.path}/io.stat: cannot parse {bad[0]!r}", pod)
        rates = self._rates(pod, counters, now)
        if policy.protected or policy.adaptive is None:
            self._release_all(pod)
        elif rates is not None:
            self._observe(pod, policy, rates)
        self._apply(pod, self._desired(pod, policy))

    def _rates(
        self, pod: PodRuntime, counters: dict[str, IoCounters], now: float
    ) -> dict[str, tuple[float, float]] | None:
        """Bytes/s per device since the last sample (None on the first one)."""
        previous, since = pod.counters, pod.sampled_at
        pod.counters, pod.sampled_at = counters, now
        if since is None or now <= since:
            return None
        elapsed = now - since
        rates = {}
        for device, current in counters.items():
            # A device shows up in io.stat with its first IO, counting from zero.
            before = previous.get(device, _ZERO)
            if current.rbytes < before.rbytes or current.wbytes < before.wbytes:
                continue  # a counter went back (a recreated cgroup): no rate this time
            rates[device] = ((current.rbytes - before.rbytes) / elapsed, (current.wbytes - before.wbytes) / elapsed)
        pod.rates = rates
        return rates

    def _rate_samples(self) -> Iterator[tuple[str, str, str, str, float]]:
        """(namespace, pod, device, direction, B/s) of every known pod; the HTTP thread calls it."""
        for pod in list(self.pods.values()):
            if pod.info is None:
                continue
            for device, pair in pod.rates.items():
                for direction, value in zip(DIRECTIONS, pair, strict=True):
                    yield pod.info.namespace, pod.info.name, device, direction, value

    def _observe(self, pod: PodRuntime, policy: PodPolicy, rates: dict[str, tuple[float, float]]) -> None:
        settings = policy.adaptive
        assert settings is not None
        allowed: set[str] | None = None
        if settings.devices:
            allowed = set()
            for spec in settings.devices:
                try:
                    allowed.add(self.devices.resolve(spec))
                except UnknownDevice as error:
                    self._count("unknown_device", f"adaptive.devices: {error}", pod)
        triggers = pod.triggers
        for device, pair in rates.items():
            if allowed is not None and device not in allowed:
                continue
            for direction, rate in zip(DIRECTIONS, pair, strict=True):
                trigger = triggers.get((device, direction))
                if trigger is None:
                    if rate <= settings.threshold_bps:
                        continue  # the common case: nothing counted, nothing to keep
                    trigger = triggers[device, direction] = Trigger()
                self._step(pod, settings, (device, direction), trigger, rate)
        # A device without IO this interval has no line growth: its triggers see a rate of 0.
        for (device, direction), trigger in list(triggers.items()):
            if device not in rates:
                self._step(pod, settings, (device, direction), trigger, 0.0)

    def _step(
        self, pod: PodRuntime, settings: AdaptiveSettings, key: tuple[str, str], trigger: Trigger, rate: float
    ) -> None:
        event = trigger.observe(rate, settings)
        if event:
            self._event(pod, *key, event, rate)
        if not trigger.throttled and not trigger.above:
            del pod.triggers[key]

    def _event(self, pod: PodRuntime, device: str, direction: str, event: str, rate: float) -> None:
        namespace, name = self._label(pod)
        self.metrics.throttle_events.labels(namespace, name, device, direction, event).inc()
        self.metrics.throttled.labels(namespace, name, device, direction).set(1 if event == THROTTLE else 0)
        pod.series.add((device, direction))
        log.info("%s/%s %s %s: %s at %.0f B/s", namespace, name, device, direction, event, rate)
        pod.record.throttled = sorted(key for key, trigger in pod.triggers.items() if trigger.throttled)
        self._dirty = True

    def _release_all(self, pod: PodRuntime) -> None:
        for (device, direction), trigger in list(pod.triggers.items()):
            if trigger.throttled:
                trigger.throttled = False
                self._event(pod, device, direction, RELEASE, 0.0)
        pod.triggers.clear()

    def _desired(self, pod: PodRuntime, policy: PodPolicy) -> dict[str, str]:
        """File key ("io.max MAJ:MIN", "cpu.weight", "cpu.max") -> the value to hold there."""
        io: dict[str, IoLimit] = {}
        for spec, limit in policy.io_max.items():
            try:
                device = self.devices.resolve(spec)
            except UnknownDevice as error:
                self._count("unknown_device", f"{'/'.join(self._label(pod))}: {error}", pod)
                continue
            io[device] = merge_limits(io.get(device, UNLIMITED), limit)
        if policy.adaptive is not None:
            ceiling = policy.adaptive.ceiling_bps
            for (device, direction), trigger in pod.triggers.items():
                if trigger.throttled:
                    cap: IoLimit = (ceiling, None, None, None) if direction == "read" else (None, ceiling, None, None)
                    io[device] = merge_limits(io.get(device, UNLIMITED), cap)
        desired = {f"{IO_MAX} {device}": format_io_max(device, limit) for device, limit in io.items()}
        if policy.cpu_weight is not None:
            desired["cpu.weight"] = str(policy.cpu_weight)
        if policy.cpu_max is not None:
            desired["cpu.max"] = policy.cpu_max
        return desired

    def _actual(self, pod: PodRuntime, key: str) -> str:
        name, _, device = key.partition(" ")
        text = read_file(f"{pod.cgroup.path}/{name}")
        if name != IO_MAX:
            return text.strip()
        try:
            limits = parse_io_max(text)
        except IoFileError as error:
            self._count("malformed_io_max", f"{pod.cgroup.path}/io.max: {error}", pod)
            return ""
        return format_io_max(device, limits.get(device, UNLIMITED))

    def _release_value(self, pod: PodRuntime, key: str) -> str:
        """What a file goes back to when we stop limiting: io.max unlimited (nobody else sets it
        on pod cgroups), cpu.* the value the kubelet had written before us."""
        name, _, device = key.partition(" ")
        if name == IO_MAX:
            return format_io_max(device, UNLIMITED)
        return pod.record.original.get(key, "100" if name == "cpu.weight" else "max 100000")

    def _apply(self, pod: PodRuntime, desired: dict[str, str]) -> None:
        record = pod.record
        if not desired and not record.applied:  # most pods, most of the time
            pod.verified = True
            return
        verify = not pod.verified or self.scans % self.config.resync_intervals == 0
        for key in sorted(set(desired) | set(record.applied)):
            name = key.partition(" ")[0]
            want, have = desired.get(key), record.applied.get(key)
            try:
                if want is None:
                    self._write(pod, name, self._release_value(pod, key))
                    del record.applied[key]
                    record.original.pop(key, None)
                    self._dirty = True
                elif want != have or verify:
                    actual = self._actual(pod, key)
                    if have is None and name != IO_MAX and key not in record.original:
                        record.original[key] = actual
                    if actual != want:
                        self._write(pod, name, want)
                    if have != want:
                        record.applied[key] = want
                        self._dirty = True
            except OSError as error:
                if error.errno == errno.ENOENT:
                    raise
                self._count(error_reason(error), f"{pod.cgroup.path}/{name}: {error.strerror}", pod)
        pod.verified = True
        if record.applied != pod.exported:
            self._export_limits(pod)
            pod.exported = dict(record.applied)

    def _export_limits(self, pod: PodRuntime) -> None:
        namespace, name = self._label(pod)
        applied = pod.record.applied
        for key, value in applied.items():
            file, _, device = key.partition(" ")
            if file == IO_MAX:
                limit = parse_io_max(value)[device]
                for direction, bps in zip(DIRECTIONS, limit[:2], strict=True):
                    if bps is None:
                        self._drop_limit(namespace, name, device, direction)
                    else:
                        self.metrics.io_limit.labels(namespace, name, device, direction).set(bps)
                        pod.series.add((device, direction))
        for device, direction in pod.series:
            if f"{IO_MAX} {device}" not in applied:
                self._drop_limit(namespace, name, device, direction)
        if "cpu.weight" in applied:
            self.metrics.cpu_weight.labels(namespace, name).set(int(applied["cpu.weight"]))
        if "cpu.max" in applied:
            quota, period = applied["cpu.max"].split()
            self.metrics.cpu_max.labels(namespace, name).set(
                float("inf") if quota == "max" else int(quota) / int(period)
            )

    def _drop_limit(self, namespace: str, name: str, device: str, direction: str) -> None:
        with contextlib.suppress(KeyError):
            self.metrics.io_limit.remove(namespace, name, device, direction)

    def _save(self) -> None:
        if not (self._dirty and self.config.state_file):
            return
        records = {uid: pod.record for uid, pod in self.pods.items() if pod.record.applied or pod.record.throttled}
        try:
            save_state(self.config.state_file, records)
            self._dirty = False
        except OSError as error:
            self._count("state_file", f"{self.config.state_file}: {error.strerror}")

    # -- lifetime ----------------------------------------------------------------------
    def healthy(self) -> bool:
        if self.last_scan_at is None:
            return False
        return self.clock() - self.last_scan_at <= max(3 * self.config.interval_seconds, 10.0)

    def run(self, stop: threading.Event) -> None:
        """Scan every interval (fixed rate) until `stop` is set, then keep or remove limits."""
        interval = self.config.interval_seconds
        deadline = self.clock()
        while not stop.is_set():
            try:
                self.scan()
            except Exception:  # one bad scan must not end the DaemonSet; it is counted and logged
                self.metrics.errors.labels("scan").inc()
                log.exception("scan failed")
            deadline = max(deadline + interval, self.clock())
            stop.wait(max(0.0, deadline - self.clock()))
        self.shutdown()

    def shutdown(self) -> None:
        if self.config.on_exit == "remove":
            for pod in self.pods.values():
                self._release_all(pod)
                try:
                    self._apply(pod, {})
                except OSError as error:
                    self._count(error_reason(error), f"{pod.cgroup.path}: {error.strerror}", pod)
            log.info("exit: limits removed")
        else:
            log.info("exit: limits kept, recorded in %s", self.config.state_file)
        self._dirty = True
        self._save()
