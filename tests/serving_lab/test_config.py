"""Reloads are checked before they apply, and `up` refuses binaries the matrix does not name."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
import yaml

from lab_fleet import deployed
from lab_fleet.serving import (
    NOWHERE,
    ConfigRejectedError,
    ServingLab,
    VersionMismatchError,
    check_versions,
)
from platform_matrix import DEFAULT_PATH, load

pytestmark = pytest.mark.serving_lab


def loaded_rules(lab: ServingLab) -> dict[str, list[str]]:
    """{group: [rule names]} as Prometheus has them loaded now."""
    with urllib.request.urlopen(f"{lab.prometheus_url}/api/v1/rules", timeout=5) as response:
        groups = json.load(response)["data"]["groups"]
    return {group["name"]: [rule["name"] for rule in group["rules"]] for group in groups}


def test_the_lab_loads_the_rules_its_environment_deploys(serving_lab: ServingLab) -> None:
    """Every group and rule of deploy/serving/dev's PrometheusRule, with its expression and
    labels, and each alert's runbook under that environment's runbook URL."""
    with urllib.request.urlopen(f"{serving_lab.prometheus_url}/api/v1/rules", timeout=5) as response:
        loaded = json.load(response)["data"]["groups"]
    expected = {group["name"]: group for group in deployed.rules()["groups"]}
    have_groups = {group["name"]: group for group in loaded}  # Prometheus lists them by name
    assert have_groups.keys() == expected.keys()
    for name, want in expected.items():
        have = have_groups[name]
        assert [rule["name"] for rule in have["rules"]] == [r.get("alert") or r["record"] for r in want["rules"]]
        for rule, source in zip(have["rules"], want["rules"], strict=True):
            assert _words(rule["query"]) == _words(source["expr"]), rule["name"]
            assert rule.get("labels", {}) == source.get("labels", {}), rule["name"]
            assert rule.get("annotations", {}) == source.get("annotations", {}), rule["name"]


def _words(expr: str) -> str:
    """An expression with its line breaks and indentation folded, no space inside parentheses or
    label matcher braces, nor between matchers, as Prometheus prints a rule's query."""
    folded = re.sub(r"\(\s+", "(", re.sub(r"\s+\)", ")", " ".join(expr.split())))
    folded = re.sub(r"\{\s+", "{", re.sub(r"\s+\}", "}", folded))
    return re.sub(r',\s+(?=\w+(?:=|!=|=~|!~)")', ",", folded)


def test_the_lab_runs_the_alertmanager_config_its_environment_deploys(serving_lab: ServingLab) -> None:
    """Alertmanager's loaded config is kube-prometheus-stack's alertmanager.config of
    deploy/serving/dev, routes, inhibitions and receivers, with the lab's URLs in place of the
    receivers' Secret files (the one change, lab_fleet/deployed.py)."""
    with urllib.request.urlopen(f"{serving_lab.alertmanager_url}/api/v2/status", timeout=5) as response:
        loaded = yaml.safe_load(json.load(response)["config"]["original"])
    config, secrets = deployed.alertmanager()
    expected = deployed.mounted(config, secrets, NOWHERE, deployed.LAB_ENV)

    def tree(route: dict) -> list:
        keys = ("receiver", "matchers", "group_by", "group_wait", "group_interval", "repeat_interval")
        return [[route.get(key) for key in keys], [tree(child) for child in route.get("routes") or []]]

    assert tree(loaded["route"]) == tree(expected["route"])
    assert loaded["inhibit_rules"] == expected["inhibit_rules"]
    hooks = {r["name"]: [h["url"] for h in r.get("webhook_configs") or []] for r in loaded["receivers"]}
    assert hooks == {r["name"]: [h["url"] for h in r.get("webhook_configs") or []] for r in expected["receivers"]}


def test_a_bad_rule_file_is_refused_and_the_old_rules_stay_loaded(serving_lab: ServingLab, tmp_path: Path) -> None:
    before = loaded_rules(serving_lab)
    bad = tmp_path / "rules.yml"
    bad.write_text(deployed.rules_text().replace('up{job="triton"}', 'up{job="triton"', 1))
    with pytest.raises(ConfigRejectedError) as caught:
        serving_lab.reload(rules=bad)
    assert str(caught.value).startswith(f"{bad}: `promtool check rules` refused it")
    assert "parse error" in str(caught.value)
    assert loaded_rules(serving_lab) == before
    assert serving_lab.state()["sources"]["rules"] == str(serving_lab.rules)


def test_a_bad_alertmanager_config_is_refused(serving_lab: ServingLab, tmp_path: Path) -> None:
    bad = tmp_path / "alertmanager.yml"
    bad.write_text(serving_lab.alertmanager_config.read_text().replace("receiver: ticket", "receiver: nobody", 1))
    with pytest.raises(
        ConfigRejectedError, match=rf"^{re.escape(str(bad))}: `amtool check-config` refused it:\n.*nobody"
    ):
        serving_lab.reload(alertmanager_config=bad)
    assert (
        serving_lab.run_dir / "alertmanager/alertmanager.yml"
    ).read_text() == serving_lab.alertmanager_config.read_text()


def test_a_good_reload_applies_and_a_plain_reload_goes_back(serving_lab: ServingLab, tmp_path: Path) -> None:
    extra = tmp_path / "rules.yml"
    data = deployed.rules()
    data["groups"].append({"name": "serving-lab.extra", "rules": [{"record": "lab:up:sum", "expr": "sum(up)"}]})
    extra.write_text(yaml.safe_dump(data))
    serving_lab.reload(rules=extra)
    assert loaded_rules(serving_lab)["serving-lab.extra"] == ["lab:up:sum"]
    serving_lab.reload(rules=serving_lab.rules)
    assert "serving-lab.extra" not in loaded_rules(serving_lab)


def test_versions_match_the_matrix_and_a_mismatch_stops_up_before_anything_starts(tmp_path: Path) -> None:
    lab = load().serving_lab
    found = check_versions()
    for package, minor in lab["debian_packages"].items():
        assert found[package].startswith(f"{minor}.")
    data = yaml.safe_load(DEFAULT_PATH.read_text())
    data["serving_lab"]["debian_packages"]["prometheus-alertmanager"] = "0.27"
    matrix = tmp_path / "matrix.yml"
    matrix.write_text(yaml.safe_dump(data))
    with pytest.raises(VersionMismatchError) as caught:
        ServingLab(tmp_path / "lab", matrix_path=matrix).up()
    message = str(caught.value)
    assert f"prometheus-alertmanager is {found['prometheus-alertmanager']}" in message
    assert "serving_lab.debian_packages.prometheus-alertmanager expects 0.27.x" in message
    assert not (tmp_path / "lab").exists()
