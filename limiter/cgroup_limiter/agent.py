"""The scan loop: discover pod cgroups, measure io.stat and IO pressure, decide, write what changed.

Files the agent owns, per pod-level cgroup: io.max (the device lines it set), cpu.weight and
cpu.max (only where a policy sets them). It writes a file only when the value it wants differs
from the value it recorded (and, on first sight and every `resync_intervals` scans, from the
value actually in the file), and records what it set in the state file.

Every interval one scan measures every pod and decides. Between scans the loop sleeps on a
`Wakeup`: a new pod cgroup directory (inotify) or a pod the source just learned of wakes it,
and `admit()` writes that pod's static limits at once instead of at the next scan.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cgroup_limiter.adaptive import DIRECTIONS, RELEASE, THROTTLE, Trigger
from cgroup_limiter.config import THRESHOLD, AdaptiveSettings, Band, NodeConfig
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
    read_file,
)
from cgroup_limiter.metrics import Metrics
from cgroup_limiter.pods import PodInfo, PodSource, PodSourceError
from cgroup_limiter.policy import PodPolicy, pod_policy
from cgroup_limiter.pressure import PressureFormatError, parse_pressure
from cgroup_limiter.state import PodRecord, State, StateFileError, load_state, save_state
from cgroup_limiter.wakeup import CgroupWatcher, Wakeup

log = logging.getLogger(__name__)

IO_MAX = "io.max"
_ZERO = IoCounters(0, 0)
Key = tuple[str, str]  # (device MAJ:MIN, direction)
Rates = dict[str, tuple[float, float]]  # device -> (read, write) B/s


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


def appeared_at(path: str) -> float:
    """When a cgroup directory appeared (Unix time): its ctime, if earlier than now."""
    now = time.time()
    try:
        return min(now, os.stat(path).st_ctime)
    except OSError:
        return now


@dataclass
class PodRuntime:
    cgroup: PodCgroup
    record: PodRecord = field(default_factory=PodRecord)
    appeared: float | None = None  # Unix time; set for cgroups that appear while the agent runs
    info: PodInfo | None = None
    policy: PodPolicy | None = None
    triggers: dict[Key, Trigger] = field(default_factory=dict)  # threshold mode
    held: dict[Key, int] = field(default_factory=dict)  # contention mode: throttled key -> calm scans
    counters: dict[str, IoCounters] = field(default_factory=dict)
    sampled_at: float | None = None
    verified: bool = False
    series: set[Key] = field(default_factory=set)
    rates: Rates = field(default_factory=dict)
    exported: dict[str, str] | None = None  # record.applied as the limit metrics show it
    warned: set[str] = field(default_factory=set)

    def throttled(self) -> list[Key]:
        if not self.triggers and not self.held:  # most pods, most of the time
            return []
        return sorted({key for key, trigger in self.triggers.items() if trigger.throttled} | set(self.held))


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
        self.wakeup: Wakeup | None = None
        self._known: Mapping[str, PodInfo] = {}
        self._restored: dict[str, PodRecord] = {}
        self._dirty = False
        self._node_problem: str | None = None
        self._source_problem: str | None = None
        self._pressure_known: bool | None = None
        state = State()
        if config.state_file:
            try:
                state = load_state(config.state_file)
            except StateFileError as error:
                self._count("state_file", str(error))
            log.info("state %s: %d pod(s) recorded", config.state_file, len(state.pods))
        self._restored = state.pods
        self.contention = Trigger(throttled=state.contended)
        self.metrics.contention.set(int(state.contended))

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

    def _failed(self, pod: PodRuntime, error: OSError) -> None:
        """A read or write on the pod's cgroup failed. A cgroup that is gone (the pod was deleted
        mid-scan) is forgotten now: no limit of it stays in the state or the metrics."""
        self._count(error_reason(error), f"{pod.cgroup.path}: {error.strerror}", pod)
        if error.errno == errno.ENOENT and not os.path.isdir(pod.cgroup.path):
            self._forget(pod.cgroup.uid)

    def _refresh_pods(self) -> None:
        """The source's answer; a failure is counted every time, logged when it changes."""
        try:
            self._known = self.source.pods()
        except PodSourceError as error:
            self.metrics.errors.labels("pod_source").inc()
            if str(error) != self._source_problem:
                log.warning("pod_source: %s (using the last answer)", error)
                self._source_problem = str(error)
        else:
            if self._source_problem:
                log.info("pod_source: answering again")
                self._source_problem = None

    def _runtime(self, cgroup: PodCgroup) -> PodRuntime:
        pod = self.pods.get(cgroup.uid)
        if pod is None or pod.cgroup.path != cgroup.path:
            record = self._restored.pop(cgroup.uid, None) or PodRecord()
            appeared = appeared_at(cgroup.path) if self.scans else None  # not those there at start
            pod = self.pods[cgroup.uid] = PodRuntime(cgroup, record, appeared)
        return pod

    # -- one scan ----------------------------------------------------------------------
    def scan(self) -> None:
        started = time.perf_counter()
        now = self.clock()
        self.devices.forget()
        cgroups = discover(self.root)
        if not cgroups and not self.root.is_dir():
            self._count("cgroup_root", f"{self.root} is not a directory")
        self._refresh_pods()
        counts = {"managed": 0, "protected": 0, "unidentified": 0}
        seen = set()
        measured: list[tuple[PodRuntime, Rates | None]] = []
        pressures: list[float] = []
        unreadable = False
        for cgroup in cgroups:
            seen.add(cgroup.uid)
            pod = self._runtime(cgroup)
            info = self._known.get(cgroup.uid)
            if info is None:
                counts["unidentified"] += 1  # never limit a pod we cannot check for protection
                continue
            try:
                policy = self._identify(pod, info)
                rates = self._measure(pod, now)
                if policy.protected:
                    value = self._pod_pressure(pod)
                    if value is None:
                        unreadable = True
                    else:
                        pressures.append(value)
            except OSError as error:
                self._failed(pod, error)
                continue
            counts["protected" if policy.protected else "managed"] += 1
            measured.append((pod, rates))
        for uid in set(self.pods) - seen:
            self._forget(uid)
        if self._restored:
            log.info("state: %d recorded pod(s) are gone: %s", len(self._restored), ", ".join(sorted(self._restored)))
            self._restored.clear()
            self._dirty = True
        self._adapt_all(measured, self._contended(pressures, unreadable))
        for pod, _ in measured:
            if self.pods.get(pod.cgroup.uid) is not pod:
                continue  # forgotten during this scan
            try:
                self._apply(pod, self._desired(pod))
            except OSError as error:
                self._failed(pod, error)
        self.scans += 1
        self._save()
        for state, number in counts.items():
            self.metrics.pod_cgroups.labels(state).set(number)
        self.last_scan_at = now
        self.metrics.last_scan.set(time.time())
        self.metrics.scan_duration.observe(time.perf_counter() - started)

    def admit(self) -> None:
        """Between scans: pod cgroups that appeared, or whose pod the source just learned of,
        get their static limits now. Rates and throttling wait for the next scan."""
        fresh = []
        for cgroup in discover(self.root):
            pod = self.pods.get(cgroup.uid)
            if pod is None or pod.cgroup.path != cgroup.path or pod.policy is None:
                fresh.append(cgroup)
        if not fresh:
            return
        self._refresh_pods()
        for cgroup in fresh:
            info = self._known.get(cgroup.uid)
            pod = self._runtime(cgroup)
            if info is None:
                continue  # the scan counts it as unidentified; the source's news wakes us again
            try:
                self._identify(pod, info)
                self._apply(pod, self._desired(pod))
            except OSError as error:
                self._failed(pod, error)
        self._save()

    def _forget(self, uid: str) -> None:
        pod = self.pods.pop(uid)
        self.metrics.forget_pod(*self._label(pod), pod.series)
        log.info("pod cgroup %s is gone", pod.cgroup.path)
        self._dirty = True

    def _identify(self, pod: PodRuntime, info: PodInfo) -> PodPolicy:
        """The pod's policy, computed again only when the source's answer for it changed."""
        if pod.info is not info:  # the same object while the source's answer is unchanged
            if pod.info != info or pod.policy is None:
                before = pod.policy
                pod.policy = pod_policy(info, self.config)
                for message in pod.policy.errors:
                    self._count("annotation", message)
                if before is None:  # first sight: take over the throttles recorded before a restart
                    threshold = pod.policy.adaptive is not None and pod.policy.adaptive.mode == THRESHOLD
                    for key in pod.record.throttled:
                        if threshold:
                            pod.triggers[key] = Trigger(throttled=True)
                        else:
                            pod.held[key] = 0
                elif _mode(before) != _mode(pod.policy):
                    self._release_all(pod)
            pod.info = info
        assert pod.policy is not None
        return pod.policy

    def _measure(self, pod: PodRuntime, now: float) -> Rates | None:
        counters, bad = parse_io_stat(read_file(f"{pod.cgroup.path}/io.stat"))
        if bad:
            self._count("malformed_io_stat", f"{pod.cgroup.path}/io.stat: cannot parse {bad[0]!r}", pod)
        return self._rates(pod, counters, now)

    def _rates(self, pod: PodRuntime, counters: dict[str, IoCounters], now: float) -> Rates | None:
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

    # -- IO pressure and contention ----------------------------------------------------
    def _pod_pressure(self, pod: PodRuntime) -> float | None:
        """A protected pod's io.pressure `some avg10`; None (counted, logged once) when unreadable."""
        path = f"{pod.cgroup.path}/io.pressure"
        try:
            return parse_pressure(read_file(path)).some.avg10
        except OSError as error:
            if error.errno == errno.ENOENT and not os.path.isdir(pod.cgroup.path):
                raise  # the cgroup went away between reads
            self._count("pressure_unavailable", f"{path}: {error.strerror} (kernel without PSI?)", pod)
        except PressureFormatError as error:
            self._count("malformed_pressure", f"{path}: {error}", pod)
        return None

    def _node_pressure(self) -> float | None:
        """The node's `some avg10` (exported, not a trigger: a lone heavy writer's own IO wait shows there)."""
        path = self.config.node_pressure_file
        try:
            value = parse_pressure(read_file(str(path))).some.avg10
        except OSError as error:
            problem = f"{path}: {error.strerror} (kernel without PSI, or booted with psi=0)"
        except PressureFormatError as error:
            problem = f"{path}: {error}"
        else:
            if self._node_problem:
                log.info("node IO pressure readable again: %s", path)
                self._node_problem = None
            self.metrics.io_pressure.labels("node").set(value)
            return value
        self.metrics.errors.labels("pressure_unavailable").inc()
        if problem != self._node_problem:
            log.warning("pressure_unavailable: %s", problem)
            self._node_problem = problem
        with contextlib.suppress(KeyError):
            self.metrics.io_pressure.remove("node")
        return None

    def _contended(self, pressures: list[float], unreadable: bool) -> bool:
        """Feed the protected pods' highest IO pressure to the node's hysteresis; True while
        throttling is allowed. No pressure known (no PSI, no protected pod) counts as none."""
        node = self._node_pressure()
        self.metrics.pressure_unavailable.set(int(node is None or unreadable))
        value = max(pressures, default=None)
        known = value is not None
        if known != self._pressure_known:
            if not known:
                log.info("no protected pod's IO pressure is known: contention mode does not throttle")
            self._pressure_known = known
        pressure = value if value is not None else 0.0
        self.metrics.io_pressure.labels("protected").set(pressure)
        settings = self.config.adaptive
        event = self.contention.observe(pressure, settings.pressure_band())
        if event == THROTTLE:
            log.info(
                "contention: protected pods' IO pressure %.2f%% above %.2f%% for %d scans: throttling the heaviest",
                pressure,
                settings.pressure_some_avg10,
                settings.trigger_intervals,
            )
        elif event == RELEASE:
            log.info(
                "contention over: IO pressure below %.2f%% for %d scans: lifting its throttles",
                settings.release_some_avg10,
                settings.calm_intervals,
            )
        if event:
            self._dirty = True
        self.metrics.contention.set(int(self.contention.throttled))
        return self.contention.throttled

    # -- deciding ----------------------------------------------------------------------
    def _adapt_all(self, measured: list[tuple[PodRuntime, Rates | None]], contended: bool) -> None:
        """Threshold-mode pods decide alone; contention-mode pods compete for `max_throttled`
        slots per device and direction, heaviest first, while the node is contended."""
        candidates: dict[Key, list[tuple[float, PodRuntime]]] = {}
        holders: Counter[Key] = Counter()
        for pod, rates in measured:
            policy = pod.policy
            assert policy is not None
            settings = policy.adaptive
            if policy.protected or settings is None:
                self._release_all(pod)
            elif settings.mode == THRESHOLD:
                if rates is not None:
                    self._observe(pod, settings, rates)
            elif not contended:
                self._release_all(pod)
            elif rates is not None:
                self._hold(pod, settings, rates, candidates)
            holders.update(pod.held.keys())  # one per pod holding the key
        for key, competing in candidates.items():
            free = self.config.adaptive.max_throttled - holders[key]
            for rate, pod in sorted(competing, key=lambda item: item[0], reverse=True)[: max(0, free)]:
                pod.held[key] = 0
                self._event(pod, *key, THROTTLE, rate)

    def _allowed(self, pod: PodRuntime, settings: AdaptiveSettings) -> set[str] | None:
        """The devices adaptive throttling may cap (None: every device in io.stat)."""
        if not settings.devices:
            return None
        allowed = set()
        for spec in settings.devices:
            try:
                allowed.add(self.devices.resolve(spec))
            except UnknownDevice as error:
                self._count("unknown_device", f"adaptive.devices: {error}", pod)
        return allowed

    def _hold(
        self,
        pod: PodRuntime,
        settings: AdaptiveSettings,
        rates: Rates,
        candidates: dict[Key, list[tuple[float, PodRuntime]]],
    ) -> None:
        """Contention mode: a throttled direction stays throttled until it has been below
        `min_rate_bps` for `calm_intervals` scans; an unthrottled one above it is a candidate."""
        allowed = self._allowed(pod, settings)
        for device, pair in rates.items():
            if allowed is not None and device not in allowed:
                continue
            for direction, rate in zip(DIRECTIONS, pair, strict=True):
                if (device, direction) not in pod.held and rate >= settings.min_rate_bps:
                    candidates.setdefault((device, direction), []).append((rate, pod))
        for key in list(pod.held):
            device, direction = key
            rate = rates.get(device, (0.0, 0.0))[DIRECTIONS.index(direction)]
            pod.held[key] = pod.held[key] + 1 if rate < settings.min_rate_bps else 0
            if pod.held[key] >= settings.calm_intervals:
                del pod.held[key]
                self._event(pod, device, direction, RELEASE, rate)

    def _observe(self, pod: PodRuntime, settings: AdaptiveSettings, rates: Rates) -> None:
        """Threshold mode: each device direction's own trigger."""
        allowed = self._allowed(pod, settings)
        band = settings.rate_band()
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
                self._step(pod, band, (device, direction), trigger, rate)
        # A device without IO this interval has no line growth: its triggers see a rate of 0.
        for (device, direction), trigger in list(triggers.items()):
            if device not in rates:
                self._step(pod, band, (device, direction), trigger, 0.0)

    def _step(self, pod: PodRuntime, band: Band, key: Key, trigger: Trigger, rate: float) -> None:
        event = trigger.observe(rate, band)
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
        pod.record.throttled = pod.throttled()
        self._dirty = True

    def _release_all(self, pod: PodRuntime) -> None:
        if not pod.triggers and not pod.held:
            return
        for (device, direction), trigger in list(pod.triggers.items()):
            if trigger.throttled:
                trigger.throttled = False
                self._event(pod, device, direction, RELEASE, 0.0)
        pod.triggers.clear()
        for device, direction in list(pod.held):
            del pod.held[device, direction]
            self._event(pod, device, direction, RELEASE, 0.0)

    def _desired(self, pod: PodRuntime) -> dict[str, str]:
        """File key ("io.max MAJ:MIN", "cpu.weight", "cpu.max") -> the value to hold there."""
        policy = pod.policy
        assert policy is not None
        desired: dict[str, str] = {}
        if policy.cpu_weight is not None:
            desired["cpu.weight"] = str(policy.cpu_weight)
        if policy.cpu_max is not None:
            desired["cpu.max"] = policy.cpu_max
        throttled = pod.throttled()
        if not policy.io_max and not throttled:
            return desired
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
            for device, direction in throttled:
                cap: IoLimit = (ceiling, None, None, None) if direction == "read" else (None, ceiling, None, None)
                io[device] = merge_limits(io.get(device, UNLIMITED), cap)
        desired.update((f"{IO_MAX} {device}", format_io_max(device, limit)) for device, limit in io.items())
        return desired

    # -- writing -----------------------------------------------------------------------
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
            pod.appeared = None
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
        if pod.appeared is not None and all(record.applied.get(k) == v for k, v in desired.items()):
            self.metrics.limit_latency.observe(max(0.0, time.time() - pod.appeared))
            pod.appeared = None
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
            save_state(self.config.state_file, State(records, self.contention.throttled))
            self._dirty = False
        except OSError as error:
            self._count("state_file", f"{self.config.state_file}: {error.strerror}")

    # -- lifetime ----------------------------------------------------------------------
    def healthy(self) -> bool:
        if self.last_scan_at is None:
            return False
        return self.clock() - self.last_scan_at <= max(3 * self.config.interval_seconds, 10.0)

    def wake(self) -> None:
        """Make the loop look now (a signal handler calls it after setting the stop event)."""
        if self.wakeup is not None:
            self.wakeup.notify()

    def _guarded(self, step: Callable[[], None], name: str) -> None:
        try:
            step()
        except Exception:  # one bad pass must not end the DaemonSet; it is counted and logged
            self.metrics.errors.labels(name).inc()
            log.exception("%s failed", name)

    def run(self, stop: threading.Event) -> None:
        """Scan every interval (fixed rate), admit new pods in between, until `stop` is set;
        then keep or remove the limits."""
        interval = self.config.interval_seconds
        watcher = CgroupWatcher(self.root, self.source.files)
        self.metrics.inotify.set(int(watcher.inotify is not None))
        if watcher.inotify is not None:
            log.info("new pod cgroups: inotify on %d director(ies) under %s", len(watcher.watched), self.root)
        else:
            log.warning("new pod cgroups: %s; found by the scan every %.2fs instead", watcher.reason, interval)
        self.wakeup = Wakeup(watcher)
        self.source.start(self.wakeup.notify)
        try:
            deadline = self.clock()
            while not stop.is_set():
                self._guarded(self.scan, "scan")
                deadline = max(deadline + interval, self.clock())
                while not stop.is_set() and deadline > self.clock():
                    if self.wakeup.wait(deadline - self.clock()) and not stop.is_set():
                        self._guarded(self.admit, "admit")
        finally:
            self.source.stop()
            self.wakeup.close()
            self.wakeup = None
            self.shutdown()

    def shutdown(self) -> None:
        if self.config.on_exit == "remove":
            for pod in list(self.pods.values()):
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


def _mode(policy: PodPolicy) -> str | None:
    return policy.adaptive.mode if policy.adaptive is not None else None
