"""gpu_health.probe, the NVML adapter: replayed against recorded NVML values (no GPU here), and live where NVML works.

RecordedNvml answers pynvml's calls from a recording and raises pynvml's own NVMLError for the
errors recorded there, so the adapter's translation of every call, value and error is what is tested.
RecordedCommands answers journalctl, dmesg and dcgmi the same way.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gpu_health import checks, probe
from gpu_health.checks import CHECKS, evaluate

RECORDS = ["h100x8_healthy", "h100x8_faulty", "h100x8_one_lost", "v100x4_retirement_pending", "rtx4090x1_consumer"]


class RecordedNvml:
    """pynvml's interface, answering from a snapshot recording (the GPU is the one thing we cannot reach)."""

    NVMLError = pynvml.NVMLError
    c_nvmlGpuFabricInfo_t = pynvml.c_nvmlGpuFabricInfo_t
    c_nvmlGpuFabricInfoV_t = pynvml.c_nvmlGpuFabricInfoV_t

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

    def nvmlDeviceGetPciInfo(self, handle: int) -> pynvml.nvmlPciInfo_t:
        info = pynvml.nvmlPciInfo_t()
        info.busId = self._value(handle, "pci_bus_id").encode()
        return info

    def _link(self, handle: int, field: str) -> int:
        return self._value(handle, "pcie_link")[field]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: int) -> int:
        return self._link(handle, "current_generation")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: int) -> int:
        return self._link(handle, "max_generation")

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: int) -> int:
        return self._link(handle, "current_width")

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: int) -> int:
        return self._link(handle, "max_width")

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        state = self.record["devices"][handle]["nvlink_state"][link]
        if isinstance(state, dict):
            raise pynvml.NVMLError(state["code"])
        return state

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter_type: int) -> int:
        counter = {pynvml.NVML_VOLATILE_ECC: "volatile", pynvml.NVML_AGGREGATE_ECC: "aggregate"}[counter_type]
        counts = self.record["devices"][handle]["ecc_errors"][counter]
        if "error" in counts:
            raise pynvml.NVMLError(counts["code"])
        kind = {
            pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED: "corrected",
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED: "uncorrected",
        }
        return counts[kind[error_type]]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        return self._value(handle, "clocks_event_reasons")

    def _fabric_into(self, handle: int, ref: Any, *, with_health: bool) -> None:
        fabric = self._value(handle, "fabric")
        if with_health and fabric["health_mask"] is None:  # a driver without nvmlDeviceGetGpuFabricInfoV
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        info = ref._obj  # what ctypes.byref(info) points at, as NVML would fill it
        info.state, info.status, info.cliqueId = fabric["state"], fabric["status"], fabric["clique_id"]
        info.clusterUuid[:] = list(bytes.fromhex(fabric["cluster_uuid"].replace("-", "")))
        if with_health:
            info.healthMask = fabric["health_mask"]

    def nvmlDeviceGetGpuFabricInfoV(self, handle: int, ref: Any) -> None:
        assert ref._obj.version == pynvml.nvmlGpuFabricInfo_v2
        self._fabric_into(handle, ref, with_health=True)

    def nvmlDeviceGetGpuFabricInfo(self, handle: int, ref: Any) -> None:
        self._fabric_into(handle, ref, with_health=False)


class RecordedCommands:
    """journalctl, dmesg and dcgmi as a recording says they answered (the kernel log of a GPU node is out of reach)."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> dict[str, Any]:
        self.calls.append(tuple(argv))
        if argv[0] == "dcgmi":
            diag = self.record["dcgm_diag"]
            if diag is None:
                return {"rc": 127, "stdout": "", "stderr": "dcgmi: command not found"}
            return {key: diag[key] for key in ("rc", "stdout", "stderr")}
        log = self.record["kernel_log"]
        if log["source"] != " ".join(argv):
            return {"rc": 1, "stdout": "", "stderr": f"{argv[0]}: not the recorded source"}
        stamp = "[ 2203.118411] " if argv[0] == "dmesg" else ""
        lines = [f"{stamp}{xid['line']}" for xid in log["xids"] for _ in range(xid["count"])]
        return {"rc": 0, "stdout": "\n".join([f"{stamp}Linux version 6.1.0-28-amd64", *lines, ""]), "stderr": ""}


def _pci_tree(root: Path, devices: list[str], vendor: str = "0x10de", pci_class: str = "0x030200") -> Path:
    for device in devices:
        (root / device).mkdir(parents=True)
        (root / device / "vendor").write_text(vendor + "\n")
        (root / device / "class").write_text(pci_class + "\n")
    return root


@pytest.mark.parametrize("name", RECORDS)
def test_the_adapter_reads_back_exactly_what_nvml_answered(name, nvml_record, tmp_path):
    record = nvml_record(name)
    nvml, commands = RecordedNvml(record), RecordedCommands(record)
    assert probe.snapshot(nvml, sysfs=str(_pci_tree(tmp_path, record["pci_gpus"])), run=commands) == record
    assert nvml.calls == ["init", "shutdown"]
    assert commands.calls[-1] == probe.DCGM_DIAG_COMMAND


def test_the_adapter_reads_dcgmis_answer_as_it_came(nvml_record, dcgm_report, tmp_path):
    record = nvml_record("h100x8_healthy")
    record["dcgm_diag"] = dcgm_report("diag_r1_fail", rc=226)
    snap = probe.snapshot(RecordedNvml(record), sysfs=str(tmp_path), run=RecordedCommands(record))
    assert snap["dcgm_diag"] == record["dcgm_diag"]


def test_an_older_driver_without_the_newer_calls_is_read_through_the_older_ones(nvml_record, tmp_path):
    record = nvml_record("h100x8_healthy")
    for device in record["devices"]:
        device["fabric"]["health_mask"] = None

    class OlderDriver(RecordedNvml):
        def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: int) -> int:
            return self._value(handle, "clocks_event_reasons")

    snap = probe.snapshot(OlderDriver(record), sysfs=str(tmp_path), run=RecordedCommands(record))
    assert snap["devices"] == record["devices"]


def test_a_driver_without_any_fabric_call_is_recorded_as_such(nvml_record, tmp_path):
    record = nvml_record("h100x8_healthy")

    class NoFabric(RecordedNvml):
        def _fabric_into(self, handle: int, ref: Any, *, with_health: bool) -> None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    snap = probe.snapshot(NoFabric(record), sysfs=str(tmp_path), run=RecordedCommands(record))
    assert {d["fabric"]["code"] for d in snap["devices"]} == {pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}


def _answers(**by_command: dict[str, Any]) -> probe.Runner:
    return lambda argv, timeout: by_command[argv[0]]


def test_xid_lines_are_grouped_per_gpu_and_xid_with_the_first_line_kept():
    log = "\n".join(
        [
            "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.105.08",
            "NVRM: Xid (PCI:0000:18:00): 13, pid=101, name=python3, Graphics SM Warp Exception",
            "NVRM: Xid (PCI:0000:18:00): 13, pid=202, name=python3, Graphics SM Warp Exception",
            "NVRM: Xid (PCI:0000:2a:00): 13, pid=303, name=python3, Graphics SM Warp Exception",
            "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        ]
    )
    read = probe.kernel_xids(_answers(journalctl={"rc": 0, "stdout": log, "stderr": ""}))
    assert read == {
        "source": "journalctl -k -b 0 -o cat --no-pager",
        "error": None,
        "xids": [
            {"line": "NVRM: Xid (PCI:0000:18:00): 13, pid=101, name=python3, Graphics SM Warp Exception", "count": 2},
            {"line": "NVRM: Xid (PCI:0000:2a:00): 13, pid=303, name=python3, Graphics SM Warp Exception", "count": 1},
            {
                "line": "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
                "count": 1,
            },
        ],
    }


def test_a_journal_the_user_may_not_read_falls_back_to_dmesg_and_then_fails_with_both():
    hint = "Hint: You are currently not seeing messages from other users and the system."
    journal = {"rc": 0, "stdout": "", "stderr": hint}
    dmesg = {"rc": 0, "stdout": "[  901.2] NVRM: Xid (PCI:0000:18:00): 48, pid=9, DBE\n", "stderr": ""}
    read = probe.kernel_xids(_answers(journalctl=journal, dmesg=dmesg))
    assert read["source"] == "dmesg"
    assert read["xids"] == [{"line": "NVRM: Xid (PCI:0000:18:00): 48, pid=9, DBE", "count": 1}]
    denied = {"rc": 1, "stdout": "", "stderr": "dmesg: read kernel buffer failed: Operation not permitted"}
    read = probe.kernel_xids(_answers(journalctl=journal, dmesg=denied))
    assert read == {
        "source": None,
        "error": f"journalctl -k -b 0 -o cat --no-pager: {hint}; dmesg: {denied['stderr']}",
        "xids": [],
    }


def test_dcgmi_missing_is_none_and_present_is_its_answer():
    assert (
        probe.dcgm_diag(probe.run_command.__class__ and _answers(dcgmi=probe.run_command(["no-such-dcgmi"], 1))) is None
    )
    answered = probe.dcgm_diag(_answers(dcgmi={"rc": 0, "stdout": "{}", "stderr": ""}))
    assert answered == {"command": "dcgmi diag -r 1 -j", "rc": 0, "stdout": "{}", "stderr": ""}


def test_run_command_reports_a_missing_command_an_exit_and_a_timeout():
    assert probe.run_command(["no-such-command-anywhere"], 5) == {
        "rc": 127,
        "stdout": "",
        "stderr": "no-such-command-anywhere: command not found",
    }
    done = probe.run_command([sys.executable, "-c", "import sys; print('out'); sys.exit('err')"], 30)
    assert done == {"rc": 1, "stdout": "out\n", "stderr": "err"}
    slow = probe.run_command([sys.executable, "-c", "import time; time.sleep(30)"], 0.5)
    assert slow["rc"] == 124 and slow["stderr"].endswith("no answer within 0.5 s")


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
    assert probe.NVML_ERROR_INVALID_ARGUMENT == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert probe.NVML_ERROR_FUNCTION_NOT_FOUND == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    assert probe.NVML_NVLINK_MAX_LINKS == pynvml.NVML_NVLINK_MAX_LINKS
    assert probe.NVML_MEMORY_ERROR_TYPE_CORRECTED == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    assert probe.NVML_MEMORY_ERROR_TYPE_UNCORRECTED == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    assert (probe.NVML_VOLATILE_ECC, probe.NVML_AGGREGATE_ECC) == (pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC)
    assert probe.NVML_GPU_FABRIC_UUID_LEN == pynvml.NVML_GPU_FABRIC_UUID_LEN
    assert pynvml.nvmlGpuFabricInfo_v2 == probe.NVML_GPU_FABRIC_INFO_V2
    assert probe.NVML_TEMPERATURE_GPU == pynvml.NVML_TEMPERATURE_GPU
    assert (
        probe.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
        == pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    )
    assert (
        probe.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR == pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    )


def test_the_check_tables_match_pynvml():
    for name, bit in checks.CLOCK_EVENT_REASONS.items():
        camel = "".join(part.capitalize() for part in name.split("_"))
        assert getattr(pynvml, f"nvmlClocksEventReason{camel}") == bit, name
    states = {value: name for name, value in vars(pynvml).items() if name.startswith("NVML_GPU_FABRIC_STATE_")}
    assert {v: states[v].removeprefix("NVML_GPU_FABRIC_STATE_").lower().replace("_", " ") for v in states} == (
        checks.NVML_GPU_FABRIC_STATE
    )
    fields = {"DEGRADED_BW": 0, "ROUTE_UNHEALTHY": 1, "INCORRECT_CONFIGURATION": 2}
    for field, index in fields.items():
        shift, width, problems = checks.FABRIC_HEALTH[index]
        assert shift == getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_{field}")
        assert width == getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_{field}")
        bad = {
            value for name, value in vars(pynvml).items() if name.startswith(f"NVML_GPU_FABRIC_HEALTH_MASK_{field}_")
        }
        healthy = {
            getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_{field}_{ok}", None)
            for ok in ("NOT_SUPPORTED", "FALSE", "NONE")
        }
        assert set(problems) == bad - healthy, field


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (probe.NvmlPciInfo, pynvml.nvmlPciInfo_t),
        (probe.NvmlGpuFabricInfo, pynvml.c_nvmlGpuFabricInfo_t),
        (probe.NvmlGpuFabricInfoV2, pynvml.c_nvmlGpuFabricInfoV_t),
    ],
)
def test_the_ctypes_structures_are_laid_out_as_pynvmls(ours, theirs):
    def layout(struct: type[ctypes.Structure]) -> list[tuple[str, int, int]]:
        return [(name, getattr(struct, name).offset, getattr(struct, name).size) for name, *_ in struct._fields_]

    assert ctypes.sizeof(ours) == ctypes.sizeof(theirs)
    assert layout(ours) == layout(theirs)


def _live_nvml() -> str | None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return str(exc)
    pynvml.nvmlShutdown()
    return None


@pytest.mark.skipif(_live_nvml() is not None, reason=f"no usable NVML on this machine: {_live_nvml()}")
def test_on_a_gpu_host_both_bindings_read_the_same_and_the_checks_judge_it(nvml_record, expect):
    live, through_ctypes = probe.snapshot(pynvml), probe.snapshot(probe.CtypesNvml())

    def steady(snap: dict[str, Any]) -> list[dict[str, Any]]:
        """What does not move between two reads: not the temperature, the clocks or the idle link's generation."""
        moving = ("temperature_c", "clocks_event_reasons", "pcie_link")
        return [{key: value for key, value in device.items() if key not in moving} for device in snap["devices"]]

    assert through_ctypes["nvml"] == live["nvml"] and steady(through_ctypes) == steady(live)
    recorded = nvml_record("h100x8_healthy")
    assert set(live) == set(recorded) and all(set(d) == set(recorded["devices"][0]) for d in live["devices"])
    expected = expect("prod", "gpu-p01.prod.example.com", gpu_fleet_gpu_count=len(live["devices"])).gpu
    outcomes = evaluate(live, expected)
    assert set(outcomes) == set(CHECKS) and outcomes["count"].status == "pass"
