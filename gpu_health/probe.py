"""Read the GPUs' health through NVML into a plain, JSON-ready snapshot: the thin adapter.

This module is the only code that talks to NVML. It uses the standard library only and
stays Python 3.9 compatible, because the compliance suite also runs it on the node itself
(RHEL 9 ships 3.9), where pynvml may be missing: `load_nvml()` then falls back to a ctypes
binding of the few NVML calls the snapshot needs, with pynvml's names and error type.

Each per-device field holds the value NVML returned, or {"error": <NVML error string>,
"code": <NVML return code>} when the call failed (NOT_SUPPORTED on GPUs without the feature).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_TEMPERATURE_GPU = 0
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
PCI_VENDOR_NVIDIA = "0x10de"


class CtypesNvmlError(Exception):
    """pynvml.NVMLError's shape: `value` is the NVML return code."""

    def __init__(self, value: int, text: str) -> None:
        super().__init__(text)
        self.value = value


class CtypesNvml:
    """The NVML calls of `snapshot()`, bound with ctypes, named and typed as pynvml names them."""

    def __init__(self, library: str = "libnvidia-ml.so.1") -> None:
        self.NVMLError = CtypesNvmlError
        try:
            self._lib = ctypes.CDLL(library)
        except OSError as exc:
            raise CtypesNvmlError(NVML_ERROR_LIBRARY_NOT_FOUND, f"NVML Shared Library Not Found ({exc})") from exc
        self._lib.nvmlErrorString.restype = ctypes.c_char_p

    def _call(self, name: str, *args: Any) -> None:
        ret = getattr(self._lib, name)(*args)
        if ret != NVML_SUCCESS:
            raise CtypesNvmlError(ret, self._lib.nvmlErrorString(ret).decode())

    def _string(self, name: str, *args: Any) -> str:
        buffer = ctypes.create_string_buffer(96)
        self._call(name, *args, buffer, ctypes.c_uint(96))
        return buffer.value.decode()

    def _uints(self, name: str, handle: Any, count: int) -> tuple[int, ...]:
        values = [ctypes.c_uint() for _ in range(count)]
        self._call(name, handle, *(ctypes.byref(value) for value in values))
        return tuple(value.value for value in values)

    def nvmlInit(self) -> None:
        self._call("nvmlInit_v2")

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return self._string("nvmlSystemGetDriverVersion")

    def nvmlDeviceGetCount(self) -> int:
        count = ctypes.c_uint()
        self._call("nvmlDeviceGetCount_v2", ctypes.byref(count))
        return count.value

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        handle = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
        return handle

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._string("nvmlDeviceGetName", handle)

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return self._string("nvmlDeviceGetUUID", handle)

    def nvmlDeviceGetPersistenceMode(self, handle: Any) -> int:
        return self._uints("nvmlDeviceGetPersistenceMode", handle, 1)[0]

    def nvmlDeviceGetEccMode(self, handle: Any) -> list[int]:
        return list(self._uints("nvmlDeviceGetEccMode", handle, 2))

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        value = ctypes.c_uint()
        self._call("nvmlDeviceGetTemperature", handle, ctypes.c_int(sensor), ctypes.byref(value))
        return value.value

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int:
        return self._uints("nvmlDeviceGetRetiredPagesPendingStatus", handle, 1)[0]

    def nvmlDeviceGetRetiredPages(self, handle: Any, cause: int) -> list[int]:
        count = ctypes.c_uint(0)
        ret = self._lib.nvmlDeviceGetRetiredPages(handle, ctypes.c_int(cause), ctypes.byref(count), None)
        if ret not in (NVML_SUCCESS, 7):  # 7: NVML_ERROR_INSUFFICIENT_SIZE, the expected answer to a size query
            raise CtypesNvmlError(ret, self._lib.nvmlErrorString(ret).decode())
        count.value = count.value * 2 + 5
        pages = (ctypes.c_ulonglong * count.value)()
        self._call("nvmlDeviceGetRetiredPages", handle, ctypes.c_int(cause), ctypes.byref(count), pages)
        return [int(page) for page in pages[: count.value]]

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, ...]:
        return self._uints("nvmlDeviceGetRemappedRows", handle, 4)


def load_nvml() -> Any:
    """pynvml where it is installed, the ctypes binding otherwise (raises its NVMLError)."""
    try:
        import pynvml
    except ImportError:
        return CtypesNvml()
    return pynvml


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _error(exc: Exception) -> dict[str, Any]:
    return {"error": str(exc), "code": getattr(exc, "value", None)}


def _read(nvml: Any, call: Callable[[], Any]) -> Any:
    """One NVML query: its value, or the NVML error as data (the check logic decides what it means)."""
    try:
        return call()
    except nvml.NVMLError as exc:
        return _error(exc)


def _device(nvml: Any, index: int) -> dict[str, Any]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)

    def ecc() -> dict[str, int]:
        current, pending = nvml.nvmlDeviceGetEccMode(handle)
        return {"current": int(current), "pending": int(pending)}

    def retired_pages() -> dict[str, int]:
        single = nvml.nvmlDeviceGetRetiredPages(handle, NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
        double = nvml.nvmlDeviceGetRetiredPages(handle, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        return {
            "pending": int(nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)),
            "single_bit_ecc": len(single),
            "double_bit_ecc": len(double),
        }

    def remapped_rows() -> dict[str, int]:
        correctable, uncorrectable, pending, failure = nvml.nvmlDeviceGetRemappedRows(handle)
        return {
            "correctable": int(correctable),
            "uncorrectable": int(uncorrectable),
            "pending": int(pending),
            "failure": int(failure),
        }

    return {
        "index": index,
        "name": _read(nvml, lambda: _text(nvml.nvmlDeviceGetName(handle))),
        "uuid": _read(nvml, lambda: _text(nvml.nvmlDeviceGetUUID(handle))),
        "persistence_mode": _read(nvml, lambda: int(nvml.nvmlDeviceGetPersistenceMode(handle))),
        "ecc_mode": _read(nvml, ecc),
        "temperature_c": _read(nvml, lambda: int(nvml.nvmlDeviceGetTemperature(handle, NVML_TEMPERATURE_GPU))),
        "retired_pages": _read(nvml, retired_pages),
        "remapped_rows": _read(nvml, remapped_rows),
    }


def _first_line(path: str) -> str:
    with open(path) as handle:
        return handle.read().strip()


def pci_gpus(sysfs: str = "/sys/bus/pci/devices") -> list[str]:
    """NVIDIA display-class devices on the PCI bus (what preflight counts), whether or not a driver is bound."""
    found = []
    try:
        devices = sorted(os.listdir(sysfs))
    except OSError:
        return []
    for device in devices:
        try:
            vendor, pci_class = (_first_line(os.path.join(sysfs, device, name)) for name in ("vendor", "class"))
        except OSError:
            continue
        if vendor == PCI_VENDOR_NVIDIA and pci_class.startswith("0x03"):
            found.append(device)
    return found


def snapshot(nvml: Any = None, sysfs: str = "/sys/bus/pci/devices") -> dict[str, Any]:
    """Everything the GPU health checks judge, read once: NVML's view and the PCI bus's.

    `nvml` is pynvml or anything with its names (CtypesNvml); None loads one. NVML that
    cannot load or initialise is recorded as {"available": false, "error": ...}.
    """
    record: dict[str, Any] = {"pci_gpus": pci_gpus(sysfs), "nvml": {"available": False}, "devices": []}
    try:
        nvml = nvml if nvml is not None else load_nvml()
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError of either binding, or a library that fails to load
        record["nvml"] = {"available": False, **_error(exc)}
        return record
    try:
        record["nvml"] = {"available": True, "driver_version": _text(nvml.nvmlSystemGetDriverVersion())}
        record["devices"] = [_device(nvml, index) for index in range(nvml.nvmlDeviceGetCount())]
    except nvml.NVMLError as exc:
        record["nvml"] = {"available": False, **_error(exc)}
    finally:
        nvml.nvmlShutdown()
    return record
