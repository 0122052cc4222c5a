"""gpu_health.probe, the NVML adapter: replayed against recorded NVML values (no GPU here), and live where NVML works.

RecordedNvml answers pynvml's calls from a recording and raises pynvml's own NVMLError for the
errors recorded there, so the adapter's translation of every call, value and error is what is tested.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pynvml
import pytest

from gpu_health import probe
from gpu_health.checks import CHECKS, GpuExpectation, evaluate


class RecordedNvml:
    """pynvml's interface, answering from a snapshot recording (the GPU is the one thing we cannot reach)."""

    NVMLError = pynvml.NVMLError

    def __init__(self, record: dict[str, Any], init_error: int | None = None) -> None:
        self.record = record
        self.init_error = init_error
        self.calls: list[str] = []

    def _value(self, handle: int, field: str) -> Any:
        value = self.record["devices"][handle][field]
        if isinstance(value, dict) and "error" in value:
            raise pynvml.NVMLError(value["code"])
        return value

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.record["nvml"]["driver_version"]

    def nvmlDeviceGetCount(self) -> int:
        return len(self.record["devices"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return self._value(handle, "name").encode()  # older pynvml returns bytes

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self._value(handle, "uuid")

    def nvmlDeviceGetPersistenceMode(self, handle: int) -> int:
        return self._value(handle, "persistence_mode")

    def nvmlDeviceGetEccMode(self, handle: int) -> list[int]:
        ecc = self._value(handle, "ecc_mode")
        return [ecc["current"], ecc["pending"]]

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._value(handle, "temperature_c")

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int:
        return self._value(handle, "retired_pages")["pending"]

    def nvmlDeviceGetRetiredPages(self, handle: int, cause: int) -> list[int]:
        pages = self._value(handle, "retired_pages")
        count = {
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: pages["single_bit_ecc"],
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: pages["double_bit_ecc"],
        }[cause]
        return [0x1F000 + 0x1000 * n for n in range(count)]

    def nvmlDeviceGetRemappedRows(self, handle: int) -> tuple[int, int, int, int]:
        rows = self._value(handle, "remapped_rows")
        return rows["correctable"], rows["uncorrectable"], rows["pending"], rows["failure"]


def _pci_tree(root: Path, devices: list[str], vendor: str = "0x10de", pci_class: str = "0x030200") -> Path:
    for device in devices:
        (root / device).mkdir(parents=True)
        (root / device / "vendor").write_text(vendor + "\n")
        (root / device / "class").write_text(pci_class + "\n")
    return root


@pytest.mark.parametrize("name", ["h100x8_healthy", "h100x8_faulty", "h100x8_one_lost", "v100x4_retirement_pending"])
def test_the_adapter_reads_back_exactly_what_nvml_answered(name, nvml_record, tmp_path):
    record = nvml_record(name)
    nvml = RecordedNvml(record)
    assert probe.snapshot(nvml, sysfs=str(_pci_tree(tmp_path, record["pci_gpus"]))) == record
    assert nvml.calls == ["init", "shutdown"]


def test_nvml_that_cannot_initialise_is_recorded_as_unavailable(tmp_path):
    nvml = RecordedNvml({}, init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    snap = probe.snapshot(nvml, sysfs=str(tmp_path))
    assert snap == {
        "pci_gpus": [],
        "nvml": {"available": False, "error": "Driver Not Loaded", "code": pynvml.NVML_ERROR_DRIVER_NOT_LOADED},
        "devices": [],
    }


def test_the_ctypes_binding_reports_a_missing_library_like_pynvml(tmp_path):
    with pytest.raises(probe.CtypesNvmlError) as missing:
        probe.CtypesNvml(str(tmp_path / "libnvidia-ml.so.1"))
    assert missing.value.value == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND == probe.NVML_ERROR_LIBRARY_NOT_FOUND


def test_pci_gpus_counts_nvidia_display_devices_only(tmp_path):
    _pci_tree(tmp_path, ["0000:18:00.0", "0000:2a:00.0"])
    _pci_tree(tmp_path, ["0000:19:00.0"], pci_class="0x068000")  # NVSwitch bridge: not a GPU
    _pci_tree(tmp_path, ["0000:00:02.0"], vendor="0x8086")
    assert probe.pci_gpus(str(tmp_path)) == ["0000:18:00.0", "0000:2a:00.0"]


def test_the_constants_match_pynvml():
    assert probe.NVML_ERROR_NOT_SUPPORTED == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert probe.NVML_TEMPERATURE_GPU == pynvml.NVML_TEMPERATURE_GPU
    assert (
        probe.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
        == pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    )
    assert (
        probe.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR == pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    )


def _live_nvml() -> str | None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return str(exc)
    pynvml.nvmlShutdown()
    return None


@pytest.mark.skipif(_live_nvml() is not None, reason=f"no usable NVML on this machine: {_live_nvml()}")
def test_on_a_gpu_host_both_bindings_read_the_same_and_the_checks_judge_it(nvml_record, matrix):
    live, through_ctypes = probe.snapshot(pynvml), probe.snapshot(probe.CtypesNvml())

    def steady(snap: dict[str, Any]) -> list[dict[str, Any]]:
        return [{key: value for key, value in device.items() if key != "temperature_c"} for device in snap["devices"]]

    assert through_ctypes["nvml"] == live["nvml"] and steady(through_ctypes) == steady(live)
    recorded = nvml_record("h100x8_healthy")
    assert set(live) == set(recorded) and all(set(d) == set(recorded["devices"][0]) for d in live["devices"])
    expected = GpuExpectation(len(live["devices"]), matrix.driver_version, 85, True, True)
    outcomes = evaluate(live, expected)
    assert set(outcomes) == set(CHECKS) and outcomes["count"].status == "pass"
