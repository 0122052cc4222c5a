"""The fleet health checks (Xid, PCIe link, NVLink, ECC counters, clocks event reasons, fabric, DCGM diag)
on recorded NVML values: both sides of each threshold, NVML errors, NOT_SUPPORTED skips."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_health.checks import GpuExpectation, evaluate
from platform_matrix import Matrix
from tests.compliance.expectations import ExpectationError, fabric_manager_required

PROD = ("prod", "gpu-p01.prod.example.com")
NOT_SUPPORTED = {"error": "Not Supported", "code": 3}


@pytest.fixture
def prod(expect) -> GpuExpectation:
    """The prod expectation of an NVSwitch node (fabric manager required), whatever the matrix says today."""
    return replace(expect(*PROD).gpu, fabric_manager=True)


@pytest.fixture
def healthy(nvml_record):
    return nvml_record("h100x8_healthy")


def check(record, expected, name):
    return evaluate(record, expected)[name]


# Xid since boot


def test_no_xid_since_boot_passes_naming_the_log(healthy, prod):
    outcome = check(healthy, prod, "xid")
    assert outcome.status == "pass"
    assert outcome.message == "no Xid since boot (journalctl -k -b 0 -o cat --no-pager)"


def test_a_fatal_xid_fails_naming_the_gpu_and_an_application_xid_does_not(nvml_record, prod):
    record = nvml_record("h100x8_faulty")
    outcome = check(record, prod, "xid")
    assert outcome.status == "fail"
    uuid = {device["index"]: device["uuid"] for device in record["devices"]}
    assert f"GPU 2 ({uuid[2]}): Xid 94 x1 (pid=51877, name=tritonserver, Contained: SM (0x1)" in outcome.message
    assert f"GPU 2 ({uuid[2]}): Xid 63 x1" in outcome.message
    assert f"GPU 7 ({uuid[7]}): Xid 64 x1" in outcome.message
    assert "Xid 13" not in outcome.message  # application error: NVIDIA's catalog says restart the application
    record["kernel_log"]["xids"] = [x for x in record["kernel_log"]["xids"] if " 13, " in x["line"]]
    outcome = check(record, prod, "xid")
    assert outcome.status == "pass"
    assert outcome.message.startswith("no fatal Xid since boot (journalctl -k -b 0 -o cat --no-pager); not fatal: ")
    assert f"GPU 1 ({uuid[1]}): Xid 13 x4 (pid=40213" in outcome.message


def test_the_fatal_list_is_the_inventorys(expect, nvml_record):
    record = nvml_record("h100x8_faulty")
    record["kernel_log"]["xids"] = [x for x in record["kernel_log"]["xids"] if " 13, " in x["line"]]
    strict = replace(expect(*PROD, compliance_gpu_xid_fatal=[13, 79]).gpu, fabric_manager=True)
    outcome = check(record, strict, "xid")
    assert outcome.status == "fail" and "Xid 13 x4" in outcome.message and "compliance_gpu_xid_fatal" in outcome.message


def test_the_gpu_that_fell_off_the_bus_is_named_by_its_pci_address(nvml_record, prod):
    outcome = check(nvml_record("h100x8_one_lost"), prod, "xid")
    assert outcome.status == "fail"
    assert "PCI 0000:db:00 (not a GPU NVML shows): Xid 79 x1 (pid='<unknown>', name=<unknown>, GPU has fallen off" in (
        outcome.message
    )


def test_xid_lines_from_dmesg_and_mig_are_read(nvml_record, expect):
    record = nvml_record("v100x4_retirement_pending")
    record["kernel_log"]["xids"].append(
        {"line": "NVRM: Xid (PCI:0000:3d:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9).", "count": 2}
    )
    outcome = check(record, expect(*PROD, gpu_fleet_gpu_count=4).gpu, "xid")
    assert outcome.status == "fail" and "(dmesg;" in outcome.message
    assert "GPU 1 (GPU-73ab4876-7734-d7c1-c7fd-e805ec99108d): Xid 48 x1" in outcome.message
    assert "GPU 2 (GPU-309d6b79-965e-da32-dae4-45508201e2bd): Xid 94 x2" in outcome.message


def test_an_unreadable_kernel_log_fails_with_the_fix(healthy, prod):
    healthy["kernel_log"] = {
        "source": None,
        "error": "journalctl -k -b 0 -o cat --no-pager: Hint: You are currently not seeing messages from other users "
        "and the system.; dmesg: read kernel buffer failed: Operation not permitted",
        "xids": [],
    }
    outcome = check(healthy, prod, "xid")
    assert outcome.status == "fail"
    assert outcome.message.startswith("cannot read the kernel log, so no Xid can be ruled out (journalctl")
    assert "with sudo (python -m tests.compliance.run ... -- --sudo) or add the remote user to systemd-journal" in (
        outcome.message
    )


def test_an_xid_line_of_an_unknown_shape_fails_rather_than_passes(healthy, prod):
    healthy["kernel_log"]["xids"] = [{"line": "NVRM: Xid (GPU 3): 79 fell off", "count": 1}]
    outcome = check(healthy, prod, "xid")
    assert outcome.status == "fail" and "cannot be judged: 'NVRM: Xid (GPU 3): 79 fell off'" in outcome.message


# PCIe link


def test_a_narrow_pcie_link_fails_even_when_idle(nvml_record, prod):
    outcome = check(nvml_record("h100x8_faulty"), prod, "pcie_link")
    assert outcome.status == "fail"
    assert outcome.message == "1 of 8 GPUs: GPU 1 (GPU-d23f0824-128b-2f33-0c5c-7fd0a6a3a450): PCIe link x8 of x16"


def test_a_lower_pcie_generation_fails_only_on_a_busy_gpu(healthy, prod):
    healthy["devices"][3]["pcie_link"]["current_generation"] = 1
    idle = check(healthy, prod, "pcie_link")
    assert idle.status == "pass", idle.message
    healthy["devices"][3]["clocks_event_reasons"] = 0x0  # at work, nothing holding the clocks
    busy = check(healthy, prod, "pcie_link")
    assert busy.status == "fail"
    assert busy.message.endswith("PCIe Gen1 of Gen5 while the GPU is not idle")
    judged = check(
        {**healthy, "devices": [{**d, "clocks_event_reasons": 1} for d in healthy["devices"]]},
        replace(prod, pcie_generation_judged_when_idle=True),
        "pcie_link",
    )
    assert judged.status == "fail" and judged.message.endswith("PCIe Gen1 of Gen5")


def test_a_gpu_that_cannot_report_its_link_fails_with_nvmls_error(healthy, prod):
    healthy["devices"][0]["pcie_link"] = {"error": "GPU is lost", "code": 15}
    outcome = check(healthy, prod, "pcie_link")
    assert outcome.status == "fail" and outcome.message.endswith("NVML: GPU is lost")


# NVLink


def test_every_nvlink_of_an_h100_is_active(healthy, prod):
    outcome = check(healthy, prod, "nvlink")
    assert outcome.status == "pass" and outcome.message == "8 GPUs: NVLinks active"


def test_an_inactive_nvlink_fails_naming_it(nvml_record, prod):
    outcome = check(nvml_record("h100x8_faulty"), prod, "nvlink")
    assert outcome.status == "fail"
    assert outcome.message == (
        "1 of 8 GPUs: GPU 3 (GPU-36f675cc-81e7-4ef5-e8e2-5d940ed90475): NVLink 5 inactive (17 of 18 links active)"
    )


def test_a_minimum_of_active_links_is_judged_on_both_sides(nvml_record, prod):
    record = nvml_record("h100x8_faulty")
    assert check(record, replace(prod, nvlink_active_links=17), "nvlink").status == "pass"
    at_18 = check(record, replace(prod, nvlink_active_links=18), "nvlink")
    assert at_18.status == "fail"
    assert at_18.message.endswith("17 NVLinks active, compliance_gpu_nvlink_active_links is 18")


def test_nvlink_on_a_gpu_without_it(nvml_record, expect):
    consumer = nvml_record("rtx4090x1_consumer")
    one = expect(*PROD, gpu_fleet_gpu_count=1, compliance_gpu_ecc_enabled=False).gpu
    outcome = check(consumer, one, "nvlink")
    assert outcome.status == "skip" and outcome.message == "NVML: NVLink not supported on these GPUs (Not Supported)"
    required = check(consumer, replace(one, nvlink_active_links=4), "nvlink")
    assert required.status == "fail" and required.message.endswith("no NVLink, 4 active links expected")


def test_an_nvlink_query_that_errors_fails(healthy, prod):
    healthy["devices"][6]["nvlink_state"][2] = {"error": "Unknown Error", "code": 999}
    outcome = check(healthy, prod, "nvlink")
    assert outcome.status == "fail" and outcome.message.endswith("link 2: NVML: Unknown Error")


# ECC counters


def test_volatile_uncorrected_errors_fail_at_the_first(nvml_record, prod):
    record = nvml_record("h100x8_faulty")
    outcome = check(record, prod, "ecc_errors")
    assert outcome.status == "fail"
    assert "GPU 2 (GPU-9531985d-5d9d-c9f8-1818-e811892f902b): 1 uncorrected ECC errors since the driver loaded" in (
        outcome.message
    )
    assert check(record, replace(prod, ecc_volatile_uncorrected_max=1), "ecc_errors").status == "pass"


def test_the_aggregate_count_is_judged_only_with_a_limit(nvml_record, prod):
    record = nvml_record("h100x8_faulty")
    tolerant = replace(prod, ecc_volatile_uncorrected_max=5)
    assert check(record, tolerant, "ecc_errors").status == "pass"  # aggregate 1, no limit
    assert check(record, replace(tolerant, ecc_aggregate_uncorrected_max=1), "ecc_errors").status == "pass"
    limited = check(record, replace(tolerant, ecc_aggregate_uncorrected_max=0), "ecc_errors")
    assert limited.status == "fail"
    assert limited.message.endswith(
        "1 uncorrected ECC errors over its life (compliance_gpu_ecc_aggregate_uncorrected_max is 0)"
    )


def test_unreadable_aggregate_counters_fail_only_where_a_limit_asks_for_them(healthy, prod):
    healthy["devices"][0]["ecc_errors"]["aggregate"] = {"error": "Corrupted infoROM", "code": 14}
    assert check(healthy, prod, "ecc_errors").status == "pass"
    outcome = check(healthy, replace(prod, ecc_aggregate_uncorrected_max=0), "ecc_errors")
    assert outcome.status == "fail" and outcome.message.endswith("aggregate ECC counters: NVML: Corrupted infoROM")


def test_ecc_counters_a_consumer_gpu_lacks_skip(nvml_record, expect):
    one = expect(*PROD, gpu_fleet_gpu_count=1, compliance_gpu_ecc_enabled=False).gpu
    outcome = check(nvml_record("rtx4090x1_consumer"), one, "ecc_errors")
    assert outcome.status == "skip" and "ECC error counters not supported" in outcome.message


# Clocks event reasons


def test_hardware_slowdown_fails_and_idle_does_not(nvml_record, prod):
    record = nvml_record("h100x8_faulty")
    outcome = check(record, prod, "clocks_event_reasons")
    assert outcome.status == "fail"
    assert outcome.message.endswith(
        "GPU 4 (GPU-6b0d549b-6f03-675a-1600-a35a099950d8): clocks held down by hw_slowdown, hw_thermal_slowdown "
        "(all reasons: hw_slowdown, hw_thermal_slowdown)"
    )
    idle = check(nvml_record("h100x8_healthy"), prod, "clocks_event_reasons")
    assert idle.status == "pass"


@pytest.mark.parametrize(
    ("mask", "status"),
    [
        (0x2 | 0x4 | 0x10 | 0x100, "pass"),  # application clocks, power cap, sync boost, display clocks
        (0x20, "fail"),  # sw thermal slowdown
        (0x80, "fail"),  # hw power brake
        (0x1 | 0x200, "pass"),  # a bit this table does not name is shown, not failed
    ],
)
def test_which_reasons_fail(healthy, prod, mask, status):
    healthy["devices"][0]["clocks_event_reasons"] = mask
    outcome = check(healthy, prod, "clocks_event_reasons")
    assert outcome.status == status, outcome.message


def test_the_failing_reasons_are_the_inventorys(healthy, expect):
    healthy["devices"][0]["clocks_event_reasons"] = 0x4
    capped = replace(expect(*PROD, compliance_gpu_clock_event_failures=["sw_power_cap"]).gpu, fabric_manager=True)
    outcome = check(healthy, capped, "clocks_event_reasons")
    assert outcome.status == "fail" and "clocks held down by sw_power_cap" in outcome.message


# Fabric manager state


def test_a_registered_fabric_passes_and_one_in_progress_or_degraded_fails(healthy, nvml_record, prod):
    assert check(healthy, prod, "fabric").message == "8 GPUs: registered with the NVLink fabric, healthy"
    outcome = check(nvml_record("h100x8_faulty"), prod, "fabric")
    assert outcome.status == "fail" and outcome.message.startswith("2 of 8 GPUs: ")
    assert "GPU 0 (GPU-6513270e-269e-0d37-f2a7-4de452e6b438): fabric registration in progress: is " in outcome.message
    assert "GPU 4 (GPU-6b0d549b-6f03-675a-1600-a35a099950d8): bandwidth degraded" in outcome.message


@pytest.mark.parametrize(
    ("fabric", "ends"),
    [
        ({"state": 1}, "fabric registration not started: is nvidia-fabricmanager running at the driver's version?"),
        ({"state": 3, "status": 999}, "fabric registration completed with NVML error 999"),
        ({"health_mask": (426 & ~(0x3 << 4)) | (1 << 4)}, "route unhealthy"),  # 426: every field healthy
        ({"health_mask": (426 & ~(0xF << 8)) | (5 << 8)}, "incorrect configuration: insufficient NVLinks"),
        ({"health_mask": None}, None),  # nvmlDeviceGetGpuFabricInfo (v1) has no health mask
    ],
)
def test_fabric_state_status_and_health(healthy, prod, fabric, ends):
    healthy["devices"][0]["fabric"].update(fabric)
    outcome = check(healthy, prod, "fabric")
    assert outcome.status == ("pass" if ends is None else "fail")
    assert ends is None or outcome.message.endswith(ends)


def test_fabric_is_not_checked_where_the_product_needs_no_fabric_manager(healthy, prod):
    outcome = check(healthy, replace(prod, fabric_manager=False), "fabric")
    assert outcome.status == "skip"
    assert outcome.message == (
        "NVIDIA-H100-80GB-HBM3 with 8 GPUs needs no fabric manager "
        "(platform matrix gpu_products.<product>.fabric_manager)"
    )


def test_a_gpu_without_fabric_state_skips(nvml_record, expect):
    volta = replace(expect(*PROD, gpu_fleet_gpu_count=4).gpu, fabric_manager=True)
    outcome = check(nvml_record("v100x4_retirement_pending"), volta, "fabric")
    assert outcome.status == "skip" and outcome.message.startswith("NVML: NVLink fabric state not supported")


def test_fabric_state_not_supported_in_the_struct_skips(healthy, prod):
    for device in healthy["devices"]:
        device["fabric"] = {**device["fabric"], "state": 0}
    assert check(healthy, prod, "fabric").status == "skip"


def test_fabric_manager_is_required_from_the_matrix_rule(matrix):
    data = {
        **matrix.data,
        "gpu_products": {
            "HGX": {"fabric_manager": {"min_gpus": 8}},
            "PCIE": {"fabric_manager": False},
        },
    }
    rule = Matrix(matrix.path, data)
    assert fabric_manager_required({"gpu_fleet_gpu_product": "HGX", "gpu_fleet_gpu_count": 8}, rule)
    assert not fabric_manager_required({"gpu_fleet_gpu_product": "HGX", "gpu_fleet_gpu_count": 4}, rule)
    assert not fabric_manager_required({"gpu_fleet_gpu_product": "PCIE", "gpu_fleet_gpu_count": 8}, rule)
    assert not fabric_manager_required({"gpu_fleet_gpu_product": "", "gpu_fleet_gpu_count": 0}, rule)


# DCGM diagnostics level 1


def test_dcgm_diag_is_skipped_where_dcgmi_is_missing(healthy, prod):
    outcome = check(healthy, prod, "dcgm_diag")
    assert outcome.status == "skip" and outcome.message.startswith("dcgmi is not installed on this node")


def test_dcgm_diag_passes_and_fails_per_gpu(healthy, prod, dcgm_report):
    healthy["dcgm_diag"] = dcgm_report("diag_r1_pass")
    passed = check(healthy, prod, "dcgm_diag")
    assert passed.status == "pass" and passed.message == "dcgmi diag -r 1 -j (exit 0): 1 tests, none failed"
    healthy["dcgm_diag"] = dcgm_report("diag_r1_fail", rc=226)
    failed = check(healthy, prod, "dcgm_diag")
    assert failed.status == "fail"
    assert failed.message == (
        "dcgmi diag -r 1 -j (exit 226): failed Deployment/software on GPU 2: "
        "GPU 2 had memory errors and row remappings are pending"
    )


def test_dcgm_warnings_are_reported_not_failed(healthy, prod, dcgm_report):
    healthy["dcgm_diag"] = dcgm_report("diag_r1_warn")
    outcome = check(healthy, prod, "dcgm_diag")
    assert outcome.status == "pass"
    assert outcome.message.endswith("warnings: Deployment/software on GPU 5: Persistence mode for GPU 5 is disabled.")


def test_dcgm_3_reports_are_read_too(healthy, prod, dcgm_report):
    healthy["dcgm_diag"] = dcgm_report("diag_r1_dcgm3_pass")
    outcome = check(healthy, prod, "dcgm_diag")
    assert outcome.status == "pass" and outcome.message.endswith("9 tests, none failed")


def test_dcgm_that_cannot_run_or_answers_garbage_fails(healthy, prod, dcgm_report):
    healthy["dcgm_diag"] = dcgm_report("diag_r1_runtime_error", rc=1)
    outcome = check(healthy, prod, "dcgm_diag")
    assert outcome.status == "fail" and outcome.message.endswith(
        "could not run: Error: unable to establish a connection to the specified host: localhost"
    )
    healthy["dcgm_diag"] = {**healthy["dcgm_diag"], "stdout": "", "stderr": "dcgmi: no answer within 300 s", "rc": 124}
    assert check(healthy, prod, "dcgm_diag").message.endswith("printed no JSON report: 'dcgmi: no answer within 300 s'")
    healthy["dcgm_diag"]["stdout"] = '{"something": "else"}'
    assert "the report has none of DCGM Diagnostic, DCGM GPU Diagnostic" in check(healthy, prod, "dcgm_diag").message
    healthy["dcgm_diag"]["stdout"] = '{"DCGM Diagnostic": {"test_categories": [{"tests": [{"results": [7]}]}]}}'
    assert "not laid out as dcgmi's" in check(healthy, prod, "dcgm_diag").message
    healthy["dcgm_diag"]["stdout"] = '{"DCGM Diagnostic": {"test_categories": []}}'
    assert check(healthy, prod, "dcgm_diag").message.endswith("reported no test result")


# A consumer part and the knobs


def test_a_consumer_gpu_skips_what_it_lacks_and_passes_the_rest(nvml_record, expect):
    one = expect(*PROD, gpu_fleet_gpu_count=1, compliance_gpu_ecc_enabled=False).gpu
    outcomes = evaluate(nvml_record("rtx4090x1_consumer"), one)
    statuses = {name: outcomes[name].status for name in ("pcie_link", "nvlink", "ecc_errors", "clocks_event_reasons")}
    assert statuses == {"pcie_link": "pass", "nvlink": "skip", "ecc_errors": "skip", "clocks_event_reasons": "pass"}


def test_the_lab_node_skips_the_new_checks_with_the_reason(expect, lab_facts):
    outcomes = evaluate(lab_facts["gpu"], expect("lab", "lab-node-1").gpu)
    for name in ("xid", "pcie_link", "nvlink", "ecc_errors", "clocks_event_reasons", "fabric", "dcgm_diag"):
        assert outcomes[name].status == "skip"
        assert outcomes[name].message.startswith("no GPU on this node (gpu_fleet_gpu_count is 0")


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("compliance_gpu_xid_fatal", [79, "48"], "a list of Xid numbers"),
        ("compliance_gpu_clock_event_failures", ["hw_slowdown", "thermal"], "a list of clocks event reasons out of"),
        ("compliance_gpu_nvlink_active_links", -1, "null or a whole number >= 0"),
        ("compliance_gpu_ecc_volatile_uncorrected_max", None, "a whole number >= 0"),
        ("compliance_gpu_ecc_aggregate_uncorrected_max", "ten", "null or a whole number >= 0"),
        ("compliance_gpu_pcie_generation_judged_when_idle", "yes", "true or false"),
    ],
)
def test_a_bad_knob_is_refused_by_name(expect, name, value, expected):
    with pytest.raises(ExpectationError, match=rf"host gpu-p01.prod.example.com: {name} is .*, expected {expected}"):
        expect(*PROD, **{name: value})
