"""Read the GPUs' health through NVML into a plain, JSON-ready snapshot: the thin adapter.

This module is the only code that talks to NVML. It uses the standard library only and
stays Python 3.9 compatible, because the compliance suite also runs it on the node itself
(RHEL 9 ships 3.9), where pynvml may be missing: `load_nvml()` then falls back to a ctypes
binding of the few NVML calls the snapshot needs, with pynvml's names and error type.

Each per-device field holds the value NVML returned, or {"error": <NVML error string>,
"code": <NVML return code>} when the call failed (NOT_SUPPORTED on GPUs without the feature).
Beside NVML the snapshot holds the kernel log's Xid lines since boot and, where `dcgmi` is
installed, the output of DCGM's level 1 diagnostic (both read only when NVML works).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_TEMPERATURE_GPU = 0
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_NVLINK_MAX_LINKS = 36  # pynvml 13.x; an older driver answers INVALID_ARGUMENT past its own maximum
NVML_GPU_FABRIC_UUID_LEN = 16
PCI_VENDOR_NVIDIA = "0x10de"

# The kernel log since boot (journalctl -k is this boot's kernel messages; dmesg the ring buffer,
# where journald is missing or unreadable) and DCGM's quick diagnostic.
XID_MARKER = "NVRM: Xid"
KERNEL_LOG_COMMANDS = (("journalctl", "-k", "-b", "0", "-o", "cat", "--no-pager"), ("dmesg",))
# journalctl exits 0 and prints nothing of the system journal to a user outside adm/systemd-journal.
JOURNAL_UNREADABLE = ("not seeing messages from other users and the system", "insufficient permissions")
DCGM_DIAG_COMMAND = ("dcgmi", "diag", "-r", "1", "-j")
DCGM_DIAG_TIMEOUT_S = 300.0


class NvmlPciInfo(ctypes.Structure):
    """nvmlPciInfo_t (nvmlDeviceGetPciInfo_v3), field for field as pynvml's nvmlPciInfo_t."""

    _fields_ = [
        ("busIdLegacy", ctypes.c_char * 16),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubSystemId", ctypes.c_uint),
        ("busId", ctypes.c_char * 32),
    ]


class NvmlGpuFabricInfo(ctypes.Structure):
    """nvmlGpuFabricInfo_t (nvmlDeviceGetGpuFabricInfo), as pynvml's c_nvmlGpuFabricInfo_t."""

    _fields_ = [
        ("clusterUuid", ctypes.c_uint8 * NVML_GPU_FABRIC_UUID_LEN),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint),
    ]


class NvmlGpuFabricInfoV2(ctypes.Structure):
    """nvmlGpuFabricInfo_v2_t (nvmlDeviceGetGpuFabricInfoV), as pynvml's c_nvmlGpuFabricInfoV_t."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_uint8 * NVML_GPU_FABRIC_UUID_LEN),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint),
        ("healthMask", ctypes.c_uint32),
    ]

    def __init__(self) -> None:
        super().__init__(version=NVML_GPU_FABRIC_INFO_V2)


NVML_GPU_FABRIC_INFO_V2 = ctypes.sizeof(NvmlGpuFabricInfoV2) | (2 << 24)  # NVML_STRUCT_VERSION(GpuFabricInfo, 2)


class CtypesNvmlError(Exception):
    """pynvml.NVMLError's shape: `value` is the NVML return code."""

    def __init__(self, value: int, text: str = "") -> None:
        super().__init__(text or ("Function Not Found" if value == NVML_ERROR_FUNCTION_NOT_FOUND else f"NVML {value}"))
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
        self.c_nvmlGpuFabricInfo_t = NvmlGpuFabricInfo
        self.c_nvmlGpuFabricInfoV_t = NvmlGpuFabricInfoV2

    def _call(self, name: str, *args: Any) -> None:
        try:
            function = getattr(self._lib, name)
        except AttributeError:  # a driver older than the call
            raise CtypesNvmlError(NVML_ERROR_FUNCTION_NOT_FOUND) from None
        ret = function(*args)
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

    def nvmlDeviceGetPciInfo(self, handle: Any) -> NvmlPciInfo:
        info = NvmlPciInfo()
        self._call("nvmlDeviceGetPciInfo_v3", handle, ctypes.byref(info))
        return info

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return self._uints("nvmlDeviceGetCurrPcieLinkGeneration", handle, 1)[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return self._uints("nvmlDeviceGetMaxPcieLinkGeneration", handle, 1)[0]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return self._uints("nvmlDeviceGetCurrPcieLinkWidth", handle, 1)[0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return self._uints("nvmlDeviceGetMaxPcieLinkWidth", handle, 1)[0]

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        active = ctypes.c_uint()
        self._call("nvmlDeviceGetNvLinkState", handle, ctypes.c_uint(link), ctypes.byref(active))
        return active.value

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int:
        count = ctypes.c_ulonglong()
        types = ctypes.c_uint(error_type), ctypes.c_uint(counter_type)
        self._call("nvmlDeviceGetTotalEccErrors", handle, *types, ctypes.byref(count))
        return count.value

    def _reasons(self, name: str, handle: Any) -> int:
        reasons = ctypes.c_ulonglong()
        self._call(name, handle, ctypes.byref(reasons))
        return reasons.value

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return self._reasons("nvmlDeviceGetCurrentClocksEventReasons", handle)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self._reasons("nvmlDeviceGetCurrentClocksThrottleReasons", handle)

    def nvmlDeviceGetGpuFabricInfoV(self, handle: Any, info: Any) -> None:
        self._call("nvmlDeviceGetGpuFabricInfoV", handle, info)

    def nvmlDeviceGetGpuFabricInfo(self, handle: Any, info: Any) -> None:
        self._call("nvmlDeviceGetGpuFabricInfo", handle, info)


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


def _newest(nvml: Any, names: Sequence[str], *args: Any) -> Any:
    """The first of `names` (newest NVML call first) that this binding and driver have, called with args."""
    for name in names:
        function = getattr(nvml, name, None)
        if function is None:  # a pynvml older than the call
            continue
        try:
            return function(*args)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) != NVML_ERROR_FUNCTION_NOT_FOUND:  # a driver older than the call
                raise
    raise nvml.NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)


def _uuid(raw: Any) -> str:
    text = bytes(raw).hex()
    return "-".join((text[:8], text[8:12], text[12:16], text[16:20], text[20:]))


def _fabric(nvml: Any, handle: Any) -> dict[str, Any]:
    """The GPU's NVLink fabric registration: nvmlDeviceGetGpuFabricInfoV (R550+, adds the health mask), else v1."""
    for call, struct in (
        ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
        ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t"),
    ):
        if not hasattr(nvml, call):  # a pynvml older than the call
            continue
        info = getattr(nvml, struct)()
        try:
            getattr(nvml, call)(handle, ctypes.byref(info))
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) != NVML_ERROR_FUNCTION_NOT_FOUND:  # a driver older than the call
                raise
            continue
        return {
            "state": int(info.state),
            "status": int(info.status),
            "clique_id": int(info.cliqueId),
            "cluster_uuid": _uuid(info.clusterUuid),
            "health_mask": int(info.healthMask) if hasattr(info, "healthMask") else None,
        }
    raise nvml.NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)


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

    def pcie_link() -> dict[str, int]:
        return {
            "current_generation": int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
            "max_generation": int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
            "current_width": int(nvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
            "max_width": int(nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)),
        }

    def ecc_errors(counter: int) -> Callable[[], dict[str, int]]:
        def read() -> dict[str, int]:
            return {
                "corrected": int(nvml.nvmlDeviceGetTotalEccErrors(handle, NVML_MEMORY_ERROR_TYPE_CORRECTED, counter)),
                "uncorrected": int(
                    nvml.nvmlDeviceGetTotalEccErrors(handle, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counter)
                ),
            }

        return read

    def clocks_event_reasons() -> int:
        names = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
        return int(_newest(nvml, names, handle))

    return {
        "index": index,
        "name": _read(nvml, lambda: _text(nvml.nvmlDeviceGetName(handle))),
        "uuid": _read(nvml, lambda: _text(nvml.nvmlDeviceGetUUID(handle))),
        "pci_bus_id": _read(nvml, lambda: _text(nvml.nvmlDeviceGetPciInfo(handle).busId)),
        "persistence_mode": _read(nvml, lambda: int(nvml.nvmlDeviceGetPersistenceMode(handle))),
        "ecc_mode": _read(nvml, ecc),
        "temperature_c": _read(nvml, lambda: int(nvml.nvmlDeviceGetTemperature(handle, NVML_TEMPERATURE_GPU))),
        "retired_pages": _read(nvml, retired_pages),
        "remapped_rows": _read(nvml, remapped_rows),
        "pcie_link": _read(nvml, pcie_link),
        "nvlink_state": [
            _read(nvml, lambda link=link: int(nvml.nvmlDeviceGetNvLinkState(handle, link)))
            for link in range(NVML_NVLINK_MAX_LINKS)
        ],
        "ecc_errors": {
            "volatile": _read(nvml, ecc_errors(NVML_VOLATILE_ECC)),
            "aggregate": _read(nvml, ecc_errors(NVML_AGGREGATE_ECC)),
        },
        "clocks_event_reasons": _read(nvml, clocks_event_reasons),
        "fabric": _read(nvml, lambda: _fabric(nvml, handle)),
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


Runner = Callable[[Sequence[str], float], "dict[str, Any]"]


def run_command(argv: Sequence[str], timeout: float) -> dict[str, Any]:
    """{rc, stdout, stderr} of a command; rc 127 when it is not installed, 124 when it timed out."""
    if shutil.which(argv[0]) is None:
        return {"rc": 127, "stdout": "", "stderr": f"{argv[0]}: command not found"}
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"rc": 124, "stdout": "", "stderr": f"{argv[0]}: no answer within {timeout:g} s"}
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr.strip()}


def _xid_key(line: str) -> str:
    """`NVRM: Xid (<device>): <xid>`: the part of an Xid line that names the GPU and the Xid."""
    close = line.find("): ")
    comma = line.find(",", close) if close >= 0 else -1
    return line[:comma] if comma >= 0 else line


def kernel_xids(run: Runner) -> dict[str, Any]:
    """The Xid lines of this boot's kernel log, one per GPU and Xid: its first line and how often it came.

    Grouping keeps an Xid storm (thousands of application Xid 13s) from burying or bloating the
    one line that matters; the lines themselves are judged by gpu_health.checks.
    """
    failures = []
    for argv in KERNEL_LOG_COMMANDS:
        out = run(argv, 60.0)
        unreadable = any(hint in out["stderr"] for hint in JOURNAL_UNREADABLE)
        if out["rc"] != 0 or unreadable:
            failures.append(f"{' '.join(argv)}: {out['stderr'] or 'exit ' + str(out['rc'])}")
            continue
        xids: dict[str, dict[str, Any]] = {}
        for raw in out["stdout"].splitlines():
            start = raw.find(XID_MARKER)
            if start < 0:
                continue
            line = raw[start:].strip()
            entry = xids.setdefault(_xid_key(line), {"line": line, "count": 0})
            entry["count"] += 1
        return {"source": " ".join(argv), "error": None, "xids": list(xids.values())}
    return {"source": None, "error": "; ".join(failures), "xids": []}


def dcgm_diag(run: Runner) -> dict[str, Any] | None:
    """`dcgmi diag -r 1 -j` as it answered (the check parses it), or None where dcgmi is not installed."""
    out = run(DCGM_DIAG_COMMAND, DCGM_DIAG_TIMEOUT_S)
    if out["rc"] == 127 and out["stderr"].endswith("command not found"):
        return None
    return {"command": " ".join(DCGM_DIAG_COMMAND), **out}


def snapshot(nvml: Any = None, sysfs: str = "/sys/bus/pci/devices", run: Runner = run_command) -> dict[str, Any]:
    """Everything the GPU health checks judge, read once: NVML's view, the PCI bus's, the kernel log's, DCGM's.

    `nvml` is pynvml or anything with its names (CtypesNvml); None loads one. NVML that
    cannot load or initialise is recorded as {"available": false, "error": ...}, and then
    neither the kernel log nor DCGM is read. `run` runs journalctl, dmesg and dcgmi.
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
    if record["nvml"]["available"]:
        record["kernel_log"] = kernel_xids(run)
        record["dcgm_diag"] = dcgm_diag(run)
    return record
