"""gpu_health.checks against recorded NVML values, with the prod and lab inventories' expectations."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_health.checks import CHECKS, evaluate

PROD = ("prod", "gpu-p01.prod.example.com")


@pytest.fixture
def prod(expect):
    """A prod node on Ubuntu, the fleet's path (NVIDIA's repository, the matrix's fleet pin)."""
    return expect(*PROD, os_id="ubuntu").gpu


def test_prod_expectation_comes_from_the_inventory_and_the_matrix(prod, matrix, inventory_host):
    assert prod.gpu_count == inventory_host(*PROD)["gpu_fleet_gpu_count"]
    assert prod.driver_version == matrix.driver_version


def test_a_healthy_h100_node_passes_every_check(expect, nvml_record, dcgm_report):
    record = nvml_record("h100x8_healthy")
    at_its_pin = expect(*PROD, nvidia_driver_version=record["nvml"]["driver_version"]).gpu
    record["dcgm_diag"] = dcgm_report("diag_r1_pass")
    outcomes = evaluate(record, replace(at_its_pin, fabric_manager=True))
    assert set(outcomes) == set(CHECKS)
    assert {name: o.status for name, o in outcomes.items()} == dict.fromkeys(CHECKS, "pass")
    assert outcomes["count"].message == "NVML shows 8 GPUs, gpu_fleet_gpu_count is 8"


def test_a_faulty_node_fails_each_check_naming_the_gpu(prod, nvml_record):
    record = nvml_record("h100x8_faulty")
    outcomes = evaluate(record, prod)
    uuid = {device["index"]: device["uuid"] for device in record["devices"]}
    assert outcomes["count"].status == "pass"
    assert outcomes["driver_version"].status == "fail"
    assert "535.261.03" in outcomes["driver_version"].message
    assert prod.driver_version in outcomes["driver_version"].message
    persistence = outcomes["persistence_mode"]
    assert persistence.status == "fail"
    assert persistence.message.startswith("1 of 8 GPUs: ")
    assert f"GPU 5 ({uuid[5]}): persistence mode is off, expected on" in persistence.message
    assert "GPU 6" in outcomes["ecc"].message and "ECC changes to off at the next reset" in outcomes["ecc"].message
    temperature = outcomes["temperature"].message
    assert outcomes["temperature"].status == "fail" and "GPU 2" in temperature and "91 °C" in temperature
    backlog = outcomes["page_backlog"].message
    assert outcomes["page_backlog"].status == "fail" and backlog.startswith("2 of 8 GPUs")
    assert "GPU 2" in backlog and "row remapping pending (2 correctable, 1 uncorrectable" in backlog
    assert "GPU 7" in backlog and "row remapping failed" in backlog


def test_a_gpu_that_fell_off_the_bus_fails_the_count(prod, nvml_record):
    outcome = evaluate(nvml_record("h100x8_one_lost"), prod)["count"]
    assert outcome.status == "fail"
    assert outcome.message == "gpu_fleet_gpu_count is 8 but NVML shows 7 GPUs (8 NVIDIA devices on the PCI bus)"


def test_page_retirement_pending_on_volta(expect, nvml_record):
    v100 = expect(*PROD, gpu_fleet_gpu_count=4).gpu
    outcomes = evaluate(nvml_record("v100x4_retirement_pending"), v100)
    assert outcomes["count"].status == "pass"
    assert outcomes["page_backlog"].status == "fail"
    assert outcomes["page_backlog"].message.startswith("1 of 4 GPUs: GPU 1")
    assert "page retirement pending (3 single-bit, 1 double-bit" in outcomes["page_backlog"].message


def test_the_temperature_limit_is_the_inventorys(expect, nvml_record):
    cool = expect(*PROD, compliance_gpu_max_temperature_c=35).gpu
    outcome = evaluate(nvml_record("h100x8_healthy"), cool)["temperature"]
    assert outcome.status == "fail"
    assert outcome.message.startswith("4 of 8 GPUs")  # 36, 38, 35 and 37 °C are not below 35
    assert "the limit (compliance_gpu_max_temperature_c) is below 35 °C" in outcome.message


def test_ecc_off_is_what_an_inventory_may_ask_for(expect, nvml_record):
    no_ecc = expect(*PROD, compliance_gpu_ecc_enabled=False).gpu
    outcome = evaluate(nvml_record("h100x8_healthy"), no_ecc)["ecc"]
    assert outcome.status == "fail" and "ECC is on, expected off" in outcome.message


def test_the_lab_node_skips_every_gpu_check_with_the_reason(expect, lab_facts):
    outcomes = evaluate(lab_facts["gpu"], expect("lab", "lab-node-1").gpu)
    for name, outcome in outcomes.items():
        assert outcome.status == "skip", name
        assert outcome.message.startswith("no GPU on this node (gpu_fleet_gpu_count is 0, none on the PCI bus")
        assert "Driver Not Loaded" in outcome.message


def test_a_node_that_declares_gpus_but_has_none_fails(expect, lab_facts):
    outcomes = evaluate(lab_facts["gpu"], expect("lab", "lab-node-1", gpu_fleet_gpu_count=8).gpu)
    for name, outcome in outcomes.items():
        assert outcome.status == "fail", name
        assert outcome.message == (
            "gpu_fleet_gpu_count is 8 (0 NVIDIA devices on the PCI bus) but NVML is unavailable: Driver Not Loaded"
        )


def test_gpus_the_inventory_does_not_declare_fail_the_count(expect, nvml_record):
    outcomes = evaluate(nvml_record("h100x8_healthy"), expect("lab", "lab-node-1").gpu)
    assert outcomes["count"].status == "fail"
    assert outcomes["count"].message.startswith("gpu_fleet_gpu_count is 0 but NVML shows 8 GPUs")


def test_gpus_on_the_bus_without_a_driver_fail_an_inventory_of_zero(expect, nvml_record):
    record = nvml_record("h100x8_healthy")
    record["nvml"] = {"available": False, "error": "Driver Not Loaded", "code": 9}
    record["devices"] = []
    outcomes = evaluate(record, expect("lab", "lab-node-1").gpu)
    assert outcomes["count"].status == "fail"
    assert "the PCI bus shows 8 NVIDIA GPUs" in outcomes["count"].message
    assert {o.status for name, o in outcomes.items() if name != "count"} == {"skip"}
