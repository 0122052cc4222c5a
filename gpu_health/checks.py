"""GPU health judged from an NVML snapshot (gpu_health.probe): pure logic, no NVML, no I/O.

`evaluate(snapshot, expectation)` returns one Outcome per check. A node that the inventory
declares without GPUs, and that shows none, gets every check skipped with the reason; a node
that declares GPUs that NVML cannot see fails them all. A feature NVML answers NOT_SUPPORTED
for on every GPU (ECC counters on a consumer part, NVLink on a PCIe card) skips its check.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gpu_health.probe import NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED

Status = Literal["pass", "fail", "skip"]


@dataclass(frozen=True)
class Outcome:
    """A check's verdict and the sentence an operator reads in the report."""

    status: Status
    message: str

    @classmethod
    def passed(cls, message: str) -> Outcome:
        return cls("pass", message)

    @classmethod
    def failed(cls, message: str) -> Outcome:
        return cls("fail", message)

    @classmethod
    def skipped(cls, message: str) -> Outcome:
        return cls("skip", message)


# nvmlClocksEventReason* bits (pynvml names, snake_case), the names compliance_gpu_clock_event_failures uses.
CLOCK_EVENT_REASONS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
NVML_GPU_FABRIC_STATE = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}
NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0
NVML_GPU_FABRIC_STATE_COMPLETED = 3
# NVML_GPU_FABRIC_HEALTH_MASK_*: (shift, width mask, {value: problem}); NOT_SUPPORTED (0) and the healthy value pass.
FABRIC_HEALTH = (
    (0, 0x3, {1: "bandwidth degraded"}),
    (4, 0x3, {1: "route unhealthy"}),
    (
        8,
        0xF,
        {
            2: "incorrect configuration: SysGUID",
            3: "incorrect configuration: chassis serial number",
            4: "incorrect configuration: no partition",
            5: "incorrect configuration: insufficient NVLinks",
            6: "incorrect configuration: incompatible GPU firmware",
            7: "incorrect configuration: invalid location",
            8: "incorrect configuration: GPU state invalid",
        },
    ),
)
# `NVRM: Xid (PCI:0000:18:00): 79, pid=..., GPU has fallen off the bus.`; MIG adds ` GPU-I:05` after the
# address, older drivers leave out `PCI:` (NVIDIA's Xid catalog and GPU memory error management guide).
XID_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<domain>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2}):(?P<device>[0-9a-fA-F]{2})"
    r"[^)]*\): (?P<xid>\d+),\s*(?P<text>.*)"
)
PCI_BUS_ID = re.compile(r"^(?P<domain>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2}):(?P<device>[0-9a-fA-F]{2})\.")
DCGM_ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")  # dcgmi -j: DCGM 4.x, DCGM 3.x


@dataclass(frozen=True)
class GpuExpectation:
    """What the inventory and the platform matrix say the node's GPUs must look like."""

    gpu_count: int
    driver_version: str
    max_temperature_c: float
    persistence_mode: bool
    ecc_enabled: bool
    product: str
    fatal_xids: frozenset[int]
    pcie_generation_judged_when_idle: bool
    nvlink_active_links: int | None
    ecc_volatile_uncorrected_max: int
    ecc_aggregate_uncorrected_max: int | None
    clock_event_failures: frozenset[str]
    fabric_manager: bool


CHECKS = (
    "count",
    "driver_version",
    "persistence_mode",
    "ecc",
    "temperature",
    "page_backlog",
    "xid",
    "pcie_link",
    "nvlink",
    "ecc_errors",
    "clocks_event_reasons",
    "fabric",
    "dcgm_diag",
)

Device = Mapping[str, Any]


@dataclass(frozen=True)
class Unsupported:
    """NVML answered NOT_SUPPORTED: the GPU lacks the feature, which skips rather than fails a check."""

    feature: str


Finding = str | Unsupported | None  # a problem, a feature the GPU lacks, or nothing wrong


def _failure(value: Any) -> str | None:
    """The NVML error recorded in place of a value, if any."""
    if isinstance(value, Mapping) and "error" in value:
        return f"NVML: {value['error']}"
    return None


def _unsupported(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("code") == NVML_ERROR_NOT_SUPPORTED


def _label(device: Device) -> str:
    uuid = device.get("uuid")
    return f"GPU {device['index']}" + (f" ({uuid})" if isinstance(uuid, str) else "")


def _unread(value: Any, feature: str) -> Finding:
    """What an NVML error recorded in place of a value means: the feature is missing, or a problem."""
    if _unsupported(value):
        return Unsupported(feature)
    return _failure(value)


def _per_device(devices: list[Device], judge: Callable[[Device], Finding], good: str, *, what: str) -> Outcome:
    """Fail with every device's problem, pass with `good` when `judge` finds none, skip where no GPU has the feature."""
    if not devices:
        return Outcome.failed(f"NVML shows no GPU to check the {what} of")
    findings = [(device, judge(device)) for device in devices]
    problems = [f"{_label(device)}: {found}" for device, found in findings if isinstance(found, str)]
    if problems:
        return Outcome.failed(f"{len(problems)} of {len(devices)} GPUs: " + "; ".join(problems))
    lacking = [found for _, found in findings if isinstance(found, Unsupported)]
    if len(lacking) == len(devices):
        return Outcome.skipped(f"NVML: {lacking[0].feature} not supported on these GPUs (Not Supported)")
    aside = f" ({len(lacking)} of them do not support {lacking[0].feature})" if lacking else ""
    return Outcome.passed(f"{len(devices)} GPUs: {good}{aside}")


def _count(snapshot: Mapping[str, Any], expected: GpuExpectation) -> Outcome:
    seen = len(snapshot["devices"])
    pci = len(snapshot["pci_gpus"])
    if seen == expected.gpu_count:
        return Outcome.passed(f"NVML shows {seen} GPUs, gpu_fleet_gpu_count is {expected.gpu_count}")
    return Outcome.failed(
        f"gpu_fleet_gpu_count is {expected.gpu_count} but NVML shows {seen} GPUs ({pci} NVIDIA devices on the PCI bus)"
    )


def _driver(snapshot: Mapping[str, Any], expected: GpuExpectation) -> Outcome:
    running = snapshot["nvml"]["driver_version"]
    if running == expected.driver_version:
        return Outcome.passed(f"the loaded driver is {running}, the pin")
    return Outcome.failed(
        f"the loaded driver is {running}, the pin (nvidia_driver_version) is {expected.driver_version}"
    )


def _on(flag: object) -> str:
    return "on" if flag else "off"


def _persistence(device: Device, expected: GpuExpectation) -> str | None:
    value = device["persistence_mode"]
    if error := _failure(value):
        return error
    if bool(value) != expected.persistence_mode:
        return f"persistence mode is {_on(value)}, expected {_on(expected.persistence_mode)}"
    return None


def _ecc(device: Device, expected: GpuExpectation) -> str | None:
    value = device["ecc_mode"]
    if _unsupported(value):
        return "ECC is not supported, ECC on is expected" if expected.ecc_enabled else None
    if error := _failure(value):
        return error
    want = int(expected.ecc_enabled)
    if value["current"] != want:
        return f"ECC is {_on(value['current'])}, expected {_on(want)}"
    if value["pending"] != want:
        return f"ECC changes to {_on(value['pending'])} at the next reset, expected {_on(want)}"
    return None


def _temperature(device: Device, expected: GpuExpectation) -> str | None:
    value = device["temperature_c"]
    if error := _failure(value):
        return error
    if value >= expected.max_temperature_c:
        return f"{value} °C, the limit (compliance_gpu_max_temperature_c) is below {expected.max_temperature_c:g} °C"
    return None


def _backlog(device: Device) -> str | None:
    """Pages or rows waiting for a GPU reset to be retired or remapped, or a remapping that failed."""
    problems = []
    pages, rows = device["retired_pages"], device["remapped_rows"]
    if not _unsupported(pages):
        if error := _failure(pages):
            problems.append(f"retired pages: {error}")
        elif pages["pending"]:
            problems.append(
                f"page retirement pending ({pages['single_bit_ecc']} single-bit, {pages['double_bit_ecc']} "
                "double-bit ECC pages retired so far): reset the GPU"
            )
    if not _unsupported(rows):
        if error := _failure(rows):
            problems.append(f"remapped rows: {error}")
        else:
            if rows["failure"]:
                problems.append("row remapping failed: the GPU needs service")
            if rows["pending"]:
                problems.append(
                    f"row remapping pending ({rows['correctable']} correctable, {rows['uncorrectable']} "
                    "uncorrectable rows remapped so far): reset the GPU"
                )
    if _unsupported(pages) and _unsupported(rows):
        problems.append("NVML supports neither page retirement nor row remapping here, so no backlog can be ruled out")
    return "; ".join(problems) or None


def _pci_key(match: re.Match[str] | None) -> tuple[int, int, int] | None:
    if match is None:
        return None
    return int(match["domain"], 16), int(match["bus"], 16), int(match["device"], 16)


def _xid(snapshot: Mapping[str, Any], expected: GpuExpectation) -> Outcome:
    """Xids since boot: a fatal one (compliance_gpu_xid_fatal) on any GPU fails; the others are reported."""
    log = snapshot["kernel_log"]
    if log["error"]:
        return Outcome.failed(
            f"cannot read the kernel log, so no Xid can be ruled out ({log['error']}): run the suite with sudo "
            "(python -m tests.compliance.run ... -- --sudo) or add the remote user to systemd-journal or adm"
        )
    gpus = {}
    for device in snapshot["devices"]:
        key = _pci_key(PCI_BUS_ID.match(device["pci_bus_id"])) if isinstance(device["pci_bus_id"], str) else None
        if key is not None:
            gpus[key] = _label(device)
    fatal, benign, unparsed = [], [], []
    for entry in log["xids"]:
        match = XID_LINE.search(entry["line"])
        if match is None:
            unparsed.append(entry["line"])
            continue
        key = _pci_key(match)
        where = gpus.get(key) or "PCI {:04x}:{:02x}:{:02x} (not a GPU NVML shows)".format(*key)
        seen = f"{where}: Xid {match['xid']} x{entry['count']} ({match['text'].strip()})"
        (fatal if int(match["xid"]) in expected.fatal_xids else benign).append(seen)
    source = log["source"]
    if unparsed:
        return Outcome.failed(
            f"{len(unparsed)} Xid line(s) of {source} do not read as `NVRM: Xid (PCI:<address>): <xid>, ...`, so "
            f"they cannot be judged: {unparsed[0]!r}"
        )
    if fatal:
        return Outcome.failed(
            f"fatal Xid since boot ({source}; compliance_gpu_xid_fatal): " + "; ".join(fatal) + ". Drain the node, "
            "act on NVIDIA's Xid catalog (reset the GPU or reboot), and reboot to clear this boot's log"
        )
    if benign:
        return Outcome.passed(f"no fatal Xid since boot ({source}); not fatal: " + "; ".join(benign))
    return Outcome.passed(f"no Xid since boot ({source})")


def _idle(device: Device) -> bool:
    reasons = device["clocks_event_reasons"]
    return isinstance(reasons, int) and bool(reasons & CLOCK_EVENT_REASONS["gpu_idle"])


def _pcie(device: Device, expected: GpuExpectation) -> Finding:
    """Width below the maximum always fails; a lower generation only on a busy GPU (NVIDIA lowers it when idle)."""
    link = device["pcie_link"]
    if (found := _unread(link, "the PCIe link")) is not None:
        return found
    problems = []
    if link["current_width"] < link["max_width"]:
        problems.append(f"PCIe link x{link['current_width']} of x{link['max_width']}")
    if link["current_generation"] < link["max_generation"] and (
        expected.pcie_generation_judged_when_idle or not _idle(device)
    ):
        busy = "" if _idle(device) else " while the GPU is not idle"
        problems.append(f"PCIe Gen{link['current_generation']} of Gen{link['max_generation']}{busy}")
    return "; ".join(problems) or None


def _nvlink(device: Device, expected: GpuExpectation) -> Finding:
    """Every link NVML lists must be active, or at least compliance_gpu_nvlink_active_links of them."""
    active, inactive, errors = [], [], []
    for link, state in enumerate(device["nvlink_state"]):
        if isinstance(state, int):
            (active if state == 1 else inactive).append(link)
        elif state.get("code") not in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT):  # no such link
            errors.append(f"link {link}: NVML: {state['error']}")
    if errors:
        return "; ".join(errors)
    wanted = expected.nvlink_active_links
    if not active and not inactive:
        return Unsupported("NVLink") if not wanted else f"no NVLink, {wanted} active links expected"
    if wanted is None and inactive:
        names = ", ".join(map(str, inactive))
        return f"NVLink {names} inactive ({len(active)} of {len(active) + len(inactive)} links active)"
    if wanted is not None and len(active) < wanted:
        return f"{len(active)} NVLinks active, compliance_gpu_nvlink_active_links is {wanted}"
    return None


def _ecc_errors(device: Device, expected: GpuExpectation) -> Finding:
    """Uncorrected ECC errors since the driver loaded (volatile) and over the GPU's life (aggregate)."""
    counts = device["ecc_errors"]
    volatile, aggregate = counts["volatile"], counts["aggregate"]
    if (found := _unread(volatile, "ECC error counters")) is not None:
        return found
    problems = []
    if volatile["uncorrected"] > expected.ecc_volatile_uncorrected_max:
        problems.append(
            f"{volatile['uncorrected']} uncorrected ECC errors since the driver loaded "
            f"(compliance_gpu_ecc_volatile_uncorrected_max is {expected.ecc_volatile_uncorrected_max})"
        )
    limit = expected.ecc_aggregate_uncorrected_max
    if limit is not None:
        if (error := _failure(aggregate)) is not None:
            problems.append(f"aggregate ECC counters: {error}")
        elif aggregate["uncorrected"] > limit:
            problems.append(
                f"{aggregate['uncorrected']} uncorrected ECC errors over its life "
                f"(compliance_gpu_ecc_aggregate_uncorrected_max is {limit})"
            )
    return "; ".join(problems) or None


def _reason_names(mask: int) -> list[str]:
    names = [name for name, bit in CLOCK_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASONS.values())
    return [*names, f"{unknown:#x}"] if unknown else names


def _clocks(device: Device, expected: GpuExpectation) -> Finding:
    reasons = device["clocks_event_reasons"]
    if (found := _unread(reasons, "clocks event reasons")) is not None:
        return found
    failing = [name for name in _reason_names(reasons) if name in expected.clock_event_failures]
    if failing:
        return f"clocks held down by {', '.join(failing)} (all reasons: {', '.join(_reason_names(reasons))})"
    return None


def _fabric(device: Device) -> Finding:
    """Registered with the fabric manager (state completed, status success) and no fabric health problem."""
    fabric = device["fabric"]
    if (found := _unread(fabric, "NVLink fabric state")) is not None:
        return found
    if fabric["state"] == NVML_GPU_FABRIC_STATE_NOT_SUPPORTED:
        return Unsupported("NVLink fabric state")
    if fabric["state"] != NVML_GPU_FABRIC_STATE_COMPLETED:
        state = NVML_GPU_FABRIC_STATE.get(fabric["state"], str(fabric["state"]))
        return f"fabric registration {state}: is nvidia-fabricmanager running at the driver's version?"
    if fabric["status"] != 0:
        return f"fabric registration completed with NVML error {fabric['status']}"
    mask = fabric["health_mask"] or 0
    problems = [issue for shift, width, issues in FABRIC_HEALTH if (issue := issues.get((mask >> shift) & width))]
    return "; ".join(problems) or None


def _dcgm_results(report: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(category/test, result) for every result of a dcgmi diag -j report (DCGM 3.x and 4.x layouts)."""
    root = next(report[name] for name in DCGM_ROOTS if name in report)
    return [
        (f"{category.get('category', '?')}/{test.get('name', '?')}", result)
        for category in root.get("test_categories", [])
        for test in category.get("tests", [])
        for result in test.get("results", [])
    ]


def _dcgm_entity(result: Mapping[str, Any]) -> str:
    if "entity_id" in result:
        return f"{result.get('entity_group', 'GPU')} {result['entity_id']}"
    return f"GPU {result['gpu_id']}" if "gpu_id" in result else "the node"


def _dcgm_warnings(result: Mapping[str, Any]) -> str:
    warnings = result.get("warnings") or []
    texts = [w.get("warning", "") if isinstance(w, Mapping) else str(w) for w in warnings]
    return f": {' / '.join(t for t in texts if t)}" if any(texts) else ""


def _dcgm(snapshot: Mapping[str, Any]) -> Outcome:
    """DCGM's level 1 diagnostic where dcgmi is installed: any test that fails fails the check."""
    diag = snapshot["dcgm_diag"]
    if diag is None:
        return Outcome.skipped("dcgmi is not installed on this node: DCGM diagnostics (level 1) run where it is")
    ran = f"{diag['command']} (exit {diag['rc']})"
    try:
        report = json.loads(diag["stdout"])
    except ValueError:
        return Outcome.failed(f"{ran} printed no JSON report: {(diag['stderr'] or diag['stdout'])[:300]!r}")
    root = next((report[name] for name in DCGM_ROOTS if isinstance(report, dict) and name in report), None)
    if not isinstance(root, Mapping):
        return Outcome.failed(f"{ran}: the report has none of {', '.join(DCGM_ROOTS)}")
    if root.get("runtime_error"):
        return Outcome.failed(f"{ran} could not run: {root['runtime_error']}")
    try:
        results = _dcgm_results(report)
        failed = [f"{test} on {_dcgm_entity(r)}{_dcgm_warnings(r)}" for test, r in results if r["status"] == "Fail"]
        warned = [f"{test} on {_dcgm_entity(r)}{_dcgm_warnings(r)}" for test, r in results if r["status"] == "Warn"]
    except (AttributeError, KeyError, TypeError) as exc:
        return Outcome.failed(f"{ran}: the report is not laid out as dcgmi's test_categories/tests/results ({exc!r})")
    if not results:
        return Outcome.failed(f"{ran} reported no test result")
    if failed:
        return Outcome.failed(f"{ran}: failed " + "; ".join(failed))
    tests = len({test for test, _ in results})
    aside = f"; warnings: {'; '.join(warned)}" if warned else ""
    return Outcome.passed(f"{ran}: {tests} tests, none failed{aside}")


def _fabric_check(devices: list[Device], expected: GpuExpectation) -> Outcome:
    if not expected.fabric_manager:
        return Outcome.skipped(
            f"{expected.product or 'no gpu_fleet_gpu_product'} with {expected.gpu_count} GPUs needs no fabric manager "
            "(platform matrix gpu_products.<product>.fabric_manager)"
        )
    return _per_device(devices, _fabric, "registered with the NVLink fabric, healthy", what="fabric state")


def evaluate(snapshot: Mapping[str, Any], expected: GpuExpectation) -> dict[str, Outcome]:
    """Every check of CHECKS for one node's snapshot."""
    nvml = snapshot["nvml"]
    devices: list[Device] = list(snapshot["devices"])
    if not nvml["available"]:
        why = f"NVML is unavailable: {nvml.get('error', 'unknown error')}"
        pci = len(snapshot["pci_gpus"])
        if expected.gpu_count == 0 and pci == 0:
            reason = f"no GPU on this node (gpu_fleet_gpu_count is 0, none on the PCI bus; {why})"
            return dict.fromkeys(CHECKS, Outcome.skipped(reason))
        if expected.gpu_count == 0:
            outcomes = dict.fromkeys(CHECKS, Outcome.skipped(f"gpu_fleet_gpu_count is 0; {why}"))
            outcomes["count"] = Outcome.failed(
                f"gpu_fleet_gpu_count is 0 but the PCI bus shows {pci} NVIDIA GPUs ({why})"
            )
            return outcomes
        declared = f"gpu_fleet_gpu_count is {expected.gpu_count} ({pci} NVIDIA devices on the PCI bus) but {why}"
        return dict.fromkeys(CHECKS, Outcome.failed(declared))
    if expected.gpu_count == 0 and not devices:
        return dict.fromkeys(CHECKS, Outcome.skipped("no GPU on this node (gpu_fleet_gpu_count is 0, NVML shows none)"))
    return {
        "count": _count(snapshot, expected),
        "driver_version": _driver(snapshot, expected),
        "persistence_mode": _per_device(
            devices, lambda d: _persistence(d, expected), "persistence mode as expected", what="persistence mode"
        ),
        "ecc": _per_device(devices, lambda d: _ecc(d, expected), "ECC mode as expected", what="ECC mode"),
        "temperature": _per_device(
            devices,
            lambda d: _temperature(d, expected),
            f"below {expected.max_temperature_c:g} °C",
            what="temperature",
        ),
        "page_backlog": _per_device(devices, _backlog, "no retired page or remapped row backlog", what="page backlog"),
        "xid": _xid(snapshot, expected),
        "pcie_link": _per_device(
            devices, lambda d: _pcie(d, expected), "PCIe links at their maximum width and generation", what="PCIe link"
        ),
        "nvlink": _per_device(devices, lambda d: _nvlink(d, expected), "NVLinks active", what="NVLink state"),
        "ecc_errors": _per_device(
            devices, lambda d: _ecc_errors(d, expected), "uncorrected ECC errors within the limits", what="ECC counters"
        ),
        "clocks_event_reasons": _per_device(
            devices,
            lambda d: _clocks(d, expected),
            f"clocks not held down by {', '.join(sorted(expected.clock_event_failures)) or 'any failing reason'}",
            what="clocks event reasons",
        ),
        "fabric": _fabric_check(devices, expected),
        "dcgm_diag": _dcgm(snapshot),
    }
