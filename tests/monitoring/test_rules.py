"""The rules source (monitoring/rules.py) against its tests, runbook, routing and exporters: every
alert and record has promtool cases, every alert a runbook section (what it means, what to check,
what to do, naming only commands that scripts/runbook takes) and a receiver, every DCGM field it
reads is one the exporter is configured with, and no version is written twice."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitoring import alerting, build, checks, rules, spec
from serving.gateway.metrics import LATENCY_BUCKETS
from serving.runbook import cli as runbook_cli
from tests.tools import needs_tool

ROOT = Path(__file__).resolve().parents[2]
GROUPS = rules.groups()
ALERTS = [rule for group in GROUPS for rule in group["rules"] if "alert" in rule]
RECORDS = [rule["record"] for group in GROUPS for rule in group["rules"] if "record" in rule]
UNIT_TESTS = {path: yaml.safe_load(path.read_text(encoding="utf-8")) for path in checks.unit_test_files()}
DCGM_LABELS = {"DCGM_FI_DRIVER_VERSION"}  # exported as a label of every metric, not as a metric
needs_amtool = needs_tool("amtool", "apt install prometheus-alertmanager")
# The parts of every alert's runbook section, in this order, each a bold label starting a line.
RUNBOOK_PARTS = ("Means", "Check", "Do")
# What the runbook page's placeholders stand for when its commands are parsed.
RUNBOOK_PLACEHOLDERS = {"<env>": "prod", "<model>": "text-classifier", "<release>": "24.05", "<n>": "4"}


def alert_cases() -> Iterator[tuple[Path, dict[str, Any]]]:
    for path, document in UNIT_TESTS.items():
        for test in document["tests"]:
            for case in test.get("alert_rule_test") or []:
                yield path, case


def test_every_alert_fires_in_a_case_that_checks_its_labels_once_per_severity():
    firing = {
        (case["alertname"], expected["exp_labels"].get("severity"))
        for _, case in alert_cases()
        for expected in case.get("exp_alerts") or []
    }
    missing = sorted({(a["alert"], a["labels"]["severity"]) for a in ALERTS} - firing)
    assert not missing, f"no promtool case where these fire (alert, severity): {missing}"
    for _, case in alert_cases():
        if case["alertname"] == spec.HEARTBEAT_ALERT:
            continue  # vector(1): severity is its only label, by design
        for expected in case.get("exp_alerts") or []:
            assert len(expected["exp_labels"]) > 1, f"{case['alertname']}: check the alert's labels, not only severity"


def test_every_alert_has_a_case_where_it_must_not_fire():
    quiet = {case["alertname"] for _, case in alert_cases() if not case.get("exp_alerts")}
    # The heartbeat is the one alert that must never be quiet (monitoring/tests/heartbeat.yml).
    assert not sorted({a["alert"] for a in ALERTS} - quiet - {spec.HEARTBEAT_ALERT})
    assert spec.HEARTBEAT_ALERT not in quiet


def test_every_record_has_a_case_with_expected_values():
    tested = {
        case["expr"]
        for document in UNIT_TESTS.values()
        for test in document["tests"]
        for case in test.get("promql_expr_test") or []
        if case.get("exp_samples")
    }
    assert not sorted(set(RECORDS) - tested)


def test_unit_tests_evaluate_the_groups_in_the_order_of_the_source():
    order = [group["name"] for group in GROUPS]
    for path, document in UNIT_TESTS.items():
        assert document.get("group_eval_order") == order, f"{path}: group_eval_order must be {order}"


def test_every_alert_has_a_runbook_section_and_every_section_an_alert():
    sections = re.findall(r"^### +(\S+)", spec.RUNBOOK.read_text(encoding="utf-8"), re.MULTILINE)
    assert sorted(sections) == sorted({a["alert"] for a in ALERTS})


def runbook_sections() -> dict[str, str]:
    """Each alert's section of the runbook page: its `###` heading to the next heading."""
    parts = re.split(r"^(#{2,3} +.*)$", spec.RUNBOOK.read_text(encoding="utf-8"), flags=re.MULTILINE)
    pairs = zip(parts[1::2], parts[2::2], strict=True)
    return {heading.removeprefix("### ").strip(): body for heading, body in pairs if heading.startswith("### ")}


def test_every_runbook_section_says_what_it_means_what_to_check_and_what_to_do():
    for alert, body in runbook_sections().items():
        found = re.findall(r"^\*\*(\w+):\*\*(.*)$", body, re.MULTILINE)
        assert [label for label, _ in found] == list(RUNBOOK_PARTS), f"{alert}: parts {found}, not {RUNBOOK_PARTS}"
        texts = re.split(r"^\*\*\w+:\*\*", body, flags=re.MULTILINE)[1:]
        for label, text in zip(RUNBOOK_PARTS, texts, strict=True):
            assert len(text.split()) >= 3, f"{alert}: **{label}:** says nothing"


def test_every_runbook_command_of_the_runbook_page_is_one_the_runbook_takes():
    """The page names no `scripts/runbook` command that does not exist: each one, placeholders
    filled in, parses with the runbook's own parser."""
    text = spec.RUNBOOK.read_text(encoding="utf-8")
    commands = re.findall(r"`scripts/runbook ([^`]+)`", text)
    outside = text.count("scripts/runbook") - len(commands) - text.count("`scripts/runbook`")
    assert outside == 0, "a command named outside a `scripts/runbook ...` code span"
    assert any(command.startswith("desired model-rollback") for command in commands)
    for command in commands:
        filled = command
        for placeholder in re.findall(r"<[^>]+>", command):
            assert placeholder in RUNBOOK_PLACEHOLDERS, f"`scripts/runbook {command}`: no value for {placeholder}"
            filled = filled.replace(placeholder, RUNBOOK_PLACEHOLDERS[placeholder])
        try:
            runbook_cli.parse(shlex.split(filled))
        except SystemExit:
            pytest.fail(f"monitoring/runbook.md names `scripts/runbook {command}`, which the runbook refuses")


def test_the_dcgm_fields_the_alerts_read_are_configured_in_the_exporter():
    role = ROOT / "roles/k8s_addons"
    required = set(yaml.safe_load((role / "vars/main.yml").read_text())["k8s_addons_dcgm_exporter_required_fields"])
    counters = yaml.safe_load((role / "defaults/main.yml").read_text())["k8s_addons_dcgm_exporter_counters"]
    types = {counter["field"]: counter["type"] for counter in counters}
    read = {field for rule in ALERTS for field in re.findall(r"DCGM_(?:FI|EXP)_\w+", rule["expr"])}
    # A GPU without NVLink (an L4) exports nothing for them, so a fleet's compliance cannot require them.
    only_with_nvlink = {field for field in read if "_NVLINK_" in field}
    assert read - DCGM_LABELS - only_with_nvlink <= required, "add them to k8s_addons_dcgm_exporter_required_fields"
    assert read - DCGM_LABELS <= types.keys()
    assert {field: types.get(field) for field in DCGM_LABELS} == dict.fromkeys(DCGM_LABELS, "label")


def test_the_driver_pin_is_read_from_the_matrix_and_written_nowhere_by_hand():
    pin = rules.driver_pin()
    assert f'DCGM_FI_DRIVER_VERSION!="{pin}"' in build.RULE_FILE.read_text(encoding="utf-8")
    by_hand = [
        path
        for folder in (ROOT / "monitoring", ROOT / "tests/monitoring")
        for path in folder.rglob("*")
        if path.is_file() and "generated" not in path.parts and path.suffix in {".py", ".yml", ".md"}
    ]
    assert by_hand and not [path for path in by_hand if pin in path.read_text(encoding="utf-8")]


def test_the_expected_models_are_the_folders_of_the_model_repository():
    models = rules.expected_models()
    assert models == sorted(p.name for p in (ROOT / "model_repository").iterdir() if (p / "config.pbtxt").exists())
    (not_loaded,) = [a for a in ALERTS if a["alert"] == "TritonModelNotLoaded"]
    assert all(f'"model", "{model}"' in not_loaded["expr"] for model in models)


def test_the_generated_files_are_current():
    assert checks.stale(build.outputs()) == []


def test_no_recording_rule_clamps_a_request_rate():
    assert not [r["record"] for g in GROUPS for r in g["rules"] if "record" in r and "clamp_min" in r["expr"]]


def _matches(matcher: str, labels: dict[str, str]) -> bool:
    name, operator, value = re.fullmatch(r'\s*(\w+)\s*(=~|!~|!=|=)\s*"(.*)"\s*', matcher).groups()
    actual = labels.get(name, "")
    found = re.fullmatch(value, actual) is not None if "~" in operator else actual == value
    return found != operator.startswith("!")


def test_every_route_has_a_test_case_whose_labels_match_it():
    config = yaml.safe_load(checks.ALERTMANAGER.read_text(encoding="utf-8"))
    routes = dict(alerting.routes(config))
    cases = checks.route_cases()
    assert {case["route"] for case in cases} == routes.keys()
    for case in cases:
        matchers = routes[case["route"]].get("matchers") or []
        assert all(_matches(m, case["labels"]) for m in matchers), case["name"]
        assert case["receivers"] == [routes[case["route"]]["receiver"]], case["name"]


def test_triton_down_holds_back_every_per_model_alert_and_grouping_uses_their_labels():
    config = yaml.safe_load(checks.ALERTMANAGER.read_text(encoding="utf-8"))
    (inhibit,) = [i for i in config["inhibit_rules"] if i["source_matchers"] == ['alertname="TritonDown"']]
    assert inhibit["target_matchers"] == ['model=~".+"'] and inhibit["equal"] == ["cluster"]
    assert config["route"]["group_by"] == ["cluster", "model", "node"]


@needs_amtool
def test_every_alert_reaches_the_receiver_named_after_its_severity(tmp_path):
    cases = [
        {
            "name": f"{a['alert']} ({a['labels']['severity']})",
            "route": "route",
            "labels": {"alertname": a["alert"], **a["labels"]},
            "receivers": ["heartbeat" if a["alert"] == spec.HEARTBEAT_ALERT else a["labels"]["severity"]],
        }
        for a in ALERTS
    ]
    path = tmp_path / "cases.yml"
    path.write_text(yaml.safe_dump(cases), encoding="utf-8")
    assert checks.route_tests(cases=path) == []


def test_the_gateway_latency_target_is_a_bucket_bound_of_the_gateway_histogram():
    """The latency SLI reads the bucket `le` = the target: a target between bounds would read no series."""
    assert rules.GATEWAY_LATENCY_TARGET_S in LATENCY_BUCKETS


def test_triton_burn_rates_are_tickets_and_the_gateway_slos_page():
    severities: dict[str, set[str]] = {}
    for rule in ALERTS:
        severities.setdefault(rule["alert"], set()).add(rule["labels"]["severity"])
    assert severities["TritonModelErrorBudgetBurn"] == severities["TritonModelLatencySLOBurn"] == {"ticket"}
    assert severities["GatewayAvailabilityBudgetBurn"] == severities["GatewayLatencyBudgetBurn"] == {"page", "ticket"}
