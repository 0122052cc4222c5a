"""gpu_health.probe through real C calls: both bindings (pynvml and the ctypes fallback) against a stand-in
libnvidia-ml.so.1 (nvml_stub/nvml_stub.c, the signatures and structures of nvml.h) built here with gcc.

No GPU is reachable, so the values are the stub's; what this proves is the marshalling: argument
types, 64-bit counters and masks, structure layouts and version words, missing symbols of an older
driver, and that both bindings read the same snapshot. Each read runs in a child process, because
pynvml opens libnvidia-ml.so.1 by name (LD_LIBRARY_PATH) once per process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpu_health.checks import evaluate
from tests.tools import missing_tool

HERE = Path(__file__).parent
REPO = HERE.parents[2]
READ_BOTH = """
import json, sys
import pynvml
from gpu_health import probe

def run(argv, timeout):
    if argv[0] == "dcgmi":
        return {"rc": 127, "stdout": "", "stderr": "dcgmi: command not found"}
    return {"rc": 0, "stdout": "NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.\\n", "stderr": ""}

snaps = [probe.snapshot(nvml, sysfs=sys.argv[1], run=run) for nvml in (pynvml, probe.CtypesNvml())]
print(json.dumps(snaps))
"""


def _read_through_stub(tmp_path: Path, *flags: str) -> list[dict[str, Any]]:
    if shutil.which("gcc") is None:
        pytest.skip(missing_tool("gcc", "make deps; the NVML stub library is built with it"))
    library = tmp_path / "lib" / "libnvidia-ml.so.1"
    library.parent.mkdir()
    source = HERE / "nvml_stub" / "nvml_stub.c"
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wall", "-Werror", *flags, "-o", str(library), str(source)], check=True)
    env = {**os.environ, "LD_LIBRARY_PATH": str(library.parent), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", READ_BOTH, str(tmp_path / "no-sysfs")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(done.stdout)


def test_both_bindings_read_the_same_through_the_c_interface(tmp_path):
    through_pynvml, through_ctypes = _read_through_stub(tmp_path)
    assert through_ctypes == through_pynvml
    nvswitch, consumer = through_ctypes["devices"]
    assert through_ctypes["nvml"] == {"available": True, "driver_version": "580.105.08"}
    assert nvswitch["pci_bus_id"] == "00000000:18:00.0"
    assert nvswitch["pcie_link"] == {"current_generation": 1, "max_generation": 5, "current_width": 16, "max_width": 16}
    assert nvswitch["nvlink_state"][:18] == [1] * 5 + [0] + [1] * 12
    assert nvswitch["nvlink_state"][18:] == [{"error": "Invalid Argument", "code": 2}] * 18
    assert nvswitch["ecc_errors"] == {  # 64-bit counts, error type and counter type not swapped
        "volatile": {"corrected": 10_000_000_000, "uncorrected": 10_000_000_001},
        "aggregate": {"corrected": 20_000_000_000, "uncorrected": 20_000_000_001},
    }
    assert nvswitch["clocks_event_reasons"] == 0x48 | 1 << 40
    assert nvswitch["fabric"] == {
        "state": 3,
        "status": 0,
        "clique_id": 32766,
        "cluster_uuid": "a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf",
        "health_mask": 426,  # read through nvmlDeviceGetGpuFabricInfoV: the version word was accepted
    }
    not_supported = {"error": "Not Supported", "code": 3}
    assert consumer["ecc_mode"] == consumer["remapped_rows"] == consumer["fabric"] == not_supported
    assert consumer["ecc_errors"] == {"volatile": not_supported, "aggregate": not_supported}
    assert consumer["nvlink_state"] == [not_supported] * 36
    assert through_ctypes["kernel_log"]["xids"] == [
        {"line": "NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.", "count": 1}
    ]
    assert through_ctypes["dcgm_diag"] is None


def test_an_older_driver_is_read_through_the_older_calls(tmp_path):
    through_pynvml, through_ctypes = _read_through_stub(tmp_path, "-DNVML_STUB_OLD_DRIVER")
    assert through_ctypes == through_pynvml
    nvswitch = through_ctypes["devices"][0]
    assert nvswitch["clocks_event_reasons"] == 0x48 | 1 << 40  # nvmlDeviceGetCurrentClocksThrottleReasons
    assert nvswitch["fabric"]["state"] == 3 and nvswitch["fabric"]["health_mask"] is None  # v1: no health mask


def test_the_checks_judge_what_the_bindings_read(tmp_path, expect):
    snap = _read_through_stub(tmp_path)[1]
    outcomes = evaluate(snap, expect("prod", "gpu-p01.prod.example.com", gpu_fleet_gpu_count=2).gpu)
    assert outcomes["pcie_link"].message == (
        "2 of 2 GPUs: GPU 0 (GPU-6513270e-269e-0d37-f2a7-4de452e6b438): PCIe Gen1 of Gen5 while the GPU is not idle; "
        "GPU 1 (GPU-1f0e9a4c-62b7-4d0e-8c3a-90b1d2e3f4a5): PCIe link x8 of x16"
    )
    assert outcomes["clocks_event_reasons"].message.endswith(
        "clocks held down by hw_slowdown, hw_thermal_slowdown (all reasons: hw_slowdown, hw_thermal_slowdown, "
        "0x10000000000)"
    )
    assert outcomes["nvlink"].message.endswith("NVLink 5 inactive (17 of 18 links active)")
    assert outcomes["xid"].status == "fail" and "GPU 0 (GPU-6513270e" in outcomes["xid"].message
