"""Bad input through the checks of `python -m monitoring check` (what `make test-monitoring`
runs): each failure names the file and the rule, route or test case at fault."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from monitoring import __main__ as cli
from monitoring import build, checks, dashboards, rules, spec
from tests.tools import needs_tool

needs_promtool = needs_tool("promtool", "apt install prometheus")
needs_amtool = needs_tool("amtool", "apt install prometheus-alertmanager")


def rule(**changes: object) -> dict:
    """A valid alert of the source, with fields replaced (None removes one)."""
    good = spec.alert(
        "TritonDown", "up == 0", for_="1m", severity="page", summary="s", description="{{ $labels.job }}: {{ $value }}"
    )
    for key, value in changes.items():
        section, _, field = key.partition("__")
        target = good[section] if field else good
        if value is None:
            target.pop(field or section)
        else:
            target[field or section] = value
    return good


def write_rules(path: Path, *alerts: dict) -> Path:
    path.write_text(build.to_yaml({"groups": [{"name": "bad.alerts", "rules": list(alerts)}]}), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("changes", "complaint"),
    [
        ({"labels__severity": None}, "has no severity label of page or ticket"),
        ({"labels__severity": "critical"}, "has no severity label of page or ticket"),
        ({"annotations__summary": None}, "has no summary annotation"),
        ({"annotations__runbook_url": None}, "has no runbook_url annotation"),
        ({"annotations__runbook_url": spec.RUNBOOK_URL + "#nowhere"}, "is not a section of"),
        ({"annotations__description": "it broke"}, "quotes neither {{ $value }} nor"),
    ],
)
def test_an_alert_that_breaks_the_rules_fails_the_build_naming_it(monkeypatch, changes, complaint):
    monkeypatch.setattr(rules, "groups", lambda: [{"name": "bad.alerts", "rules": [rule(**changes)]}])
    with pytest.raises(build.BuildError) as error:
        build.rule_document()
    assert str(error.value).startswith("monitoring/rules.py: group 'bad.alerts': alert 'TritonDown' ")
    assert complaint in str(error.value)


def test_build_stops_on_a_bad_source_before_writing_and_says_why(monkeypatch, capsys):
    monkeypatch.setattr(rules, "groups", lambda: [{"name": "bad.alerts", "rules": [rule(labels__severity=None)]}])
    monkeypatch.setattr(build, "write", lambda files: pytest.fail("build wrote files from a bad source"))
    assert cli.main(["build"]) == 1
    assert "alert 'TritonDown' has no severity label" in capsys.readouterr().err


@needs_promtool
def test_a_rule_file_with_a_syntax_error_names_the_file_and_the_rule(tmp_path):
    path = write_rules(tmp_path / "rules.yml", rule(expr="sum by (model (rate(x[5m]))"))
    (problem,) = checks.rule_file(path)
    assert problem.startswith(f"{path}: promtool check rules failed:")
    assert 'group "bad.alerts"' in problem and '"TritonDown"' in problem and "parse error" in problem


@needs_promtool
@needs_amtool
def test_check_runs_promtool_on_what_the_source_builds_now(monkeypatch, capsys):
    monkeypatch.setattr(rules, "groups", lambda: [{"name": "bad.alerts", "rules": [rule(expr="rate(up[5m]")]}])
    monkeypatch.setattr(checks, "unit_tests", lambda paths: [])
    monkeypatch.setattr(dashboards, "check", list)
    assert cli.main(["check"]) == 1
    err = capsys.readouterr().err
    assert "monitoring/generated/rules.yml: differs from its source" in err
    (finding,) = [line for line in err.splitlines() if "could not parse expression" in line]
    assert finding.startswith("monitoring/generated/rules.yml (as built from monitoring/rules.py): ")
    assert 'group "bad.alerts", rule 1, "TritonDown"' in finding


@needs_promtool
def test_a_rule_file_with_an_alert_without_severity_names_the_file_and_the_alert(tmp_path):
    path = write_rules(tmp_path / "rules.yml", rule(labels__severity=None))
    assert checks.rule_file(path) == [
        f"{path}: group 'bad.alerts': alert 'TritonDown' has no severity label of page or ticket (labels: {{}})"
    ]


@needs_promtool
def test_a_failing_unit_test_names_its_file_and_the_alert(tmp_path):
    test = {
        "rule_files": [str(build.RULE_FILE)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": 'up{job="triton"}', "values": "1x10"}],
                "alert_rule_test": [
                    {"eval_time": "5m", "alertname": "TritonDown", "exp_alerts": [{"exp_labels": {"job": "triton"}}]}
                ],
            }
        ],
    }
    path = tmp_path / "wrong.yml"
    path.write_text(yaml.safe_dump(test), encoding="utf-8")
    (problem,) = checks.unit_tests([path])
    assert problem.startswith(f"{path}: promtool test rules failed:") and "alertname: TritonDown" in problem


@needs_amtool
def test_a_route_to_an_unknown_receiver_names_the_file_and_the_route(tmp_path):
    config = yaml.safe_load(checks.ALERTMANAGER.read_text(encoding="utf-8"))
    config["route"]["routes"][1]["receiver"] = "pager"
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    assert checks.alertmanager_config(path) == [
        f"{path}: route.routes[1].receiver: 'pager' is not a receiver (page, ticket, heartbeat, null)"
    ]


@needs_amtool
def test_what_only_amtool_finds_names_the_file(tmp_path):
    config = yaml.safe_load(checks.ALERTMANAGER.read_text(encoding="utf-8"))
    config["route"]["group_wait"] = "thirty seconds"
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    (problem,) = checks.alertmanager_config(path)
    assert problem.startswith(f"{path}: amtool check-config failed:") and "thirty seconds" in problem


def test_a_receiver_url_written_in_git_is_refused_naming_the_webhook(tmp_path):
    config = yaml.safe_load(checks.ALERTMANAGER.read_text(encoding="utf-8"))
    hook = config["receivers"][0]["webhook_configs"][0]
    hook["url"] = "https://events.example.com/secret-token"
    del hook["url_file"]
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    (problem,) = checks.alertmanager_config(path)
    assert problem.startswith(f"{path}: receivers[0].webhook_configs[0] (receiver 'page'): a URL is a secret")


@needs_amtool
def test_a_route_case_that_reaches_another_receiver_names_the_case(tmp_path):
    cases = tmp_path / "cases.yml"
    case = {"name": "pages go to tickets", "route": "route.routes[1]", "labels": {"severity": "page"}}
    cases.write_text(yaml.safe_dump([{**case, "receivers": ["ticket"]}]), encoding="utf-8")
    assert checks.route_tests(cases=cases) == [
        f"{cases}: case 'pages go to tickets' (route.routes[1] of monitoring/alertmanager.yml):"
        " severity=page reached page, expected ticket"
    ]


def test_a_stale_generated_file_names_itself(tmp_path):
    path = tmp_path / "rules.yml"
    path.write_text("---\n", encoding="utf-8")
    assert checks.stale({path: "---\ngroups: []\n", tmp_path / "missing.yml": ""}) == [
        f"{path}: differs from its source: run `python -m monitoring build` (make monitoring)",
        f"{tmp_path / 'missing.yml'}: differs from its source: run `python -m monitoring build` (make monitoring)",
    ]
