"""GPU health judged from an NVML snapshot (gpu_health.probe): pure logic, no NVML, no I/O.

`evaluate(snapshot, expectation)` returns one Outcome per check. A node that the inventory
declares without GPUs, and that shows none, gets every check skipped with the reason; a node
that declares GPUs that NVML cannot see fails them all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gpu_health.probe import NVML_ERROR_NOT_SUPPORTED

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


@dataclass(frozen=True)
class GpuExpectation:
    """What the inventory and the platform matrix say the node's GPUs must look like."""

    gpu_count: int
    driver_version: str
    max_temperature_c: float
    persistence_mode: bool
    ecc_enabled: bool


CHECKS = ("count", "driver_version", "persistence_mode", "ecc", "temperature", "page_backlog")

Device = Mapping[str, Any]


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


def _per_device(devices: list[Device], judge: Callable[[Device], str | None], good: str, *, what: str) -> Outcome:
    """Fail with every device's problem, pass with `good` when `judge` finds none."""
    if not devices:
        return Outcome.failed(f"NVML shows no GPU to check the {what} of")
    problems = [f"{_label(device)}: {problem}" for device in devices if (problem := judge(device))]
    if problems:
        return Outcome.failed(f"{len(problems)} of {len(devices)} GPUs: " + "; ".join(problems))
    return Outcome.passed(f"{len(devices)} GPUs: {good}")


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
    }
