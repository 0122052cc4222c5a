"""Reloads are checked before they apply, and `up` refuses binaries the matrix does not name."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
import yaml

from lab_fleet.serving import (
    DEFAULT_ALERTMANAGER_CONFIG,
    DEFAULT_RULES,
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


def test_the_lab_loads_the_projects_rule_file(serving_lab: ServingLab) -> None:
    groups = yaml.safe_load(DEFAULT_RULES.read_text())["groups"]
    expected = {group["name"]: [rule.get("alert") or rule["record"] for rule in group["rules"]] for group in groups}
    assert loaded_rules(serving_lab) == expected


def test_a_bad_rule_file_is_refused_and_the_old_rules_stay_loaded(serving_lab: ServingLab, tmp_path: Path) -> None:
    before = loaded_rules(serving_lab)
    bad = tmp_path / "rules.yml"
    bad.write_text(DEFAULT_RULES.read_text().replace('up{job="triton"}', 'up{job="triton"', 1))
    with pytest.raises(ConfigRejectedError) as caught:
        serving_lab.reload(rules=bad)
    assert str(caught.value).startswith(f"{bad}: `promtool check rules` refused it")
    assert "parse error" in str(caught.value)
    assert loaded_rules(serving_lab) == before
    assert serving_lab.state()["sources"]["rules"] == str(DEFAULT_RULES)


def test_a_bad_alertmanager_config_is_refused(serving_lab: ServingLab, tmp_path: Path) -> None:
    bad = tmp_path / "alertmanager.yml"
    bad.write_text(DEFAULT_ALERTMANAGER_CONFIG.read_text().replace("receiver: ticket", "receiver: nobody", 1))
    with pytest.raises(
        ConfigRejectedError, match=rf"^{re.escape(str(bad))}: `amtool check-config` refused it:\n.*nobody"
    ):
        serving_lab.reload(alertmanager_config=bad)
    assert (
        serving_lab.run_dir / "alertmanager/alertmanager.yml"
    ).read_text() == DEFAULT_ALERTMANAGER_CONFIG.read_text()


def test_a_good_reload_applies_and_a_plain_reload_goes_back(serving_lab: ServingLab, tmp_path: Path) -> None:
    extra = tmp_path / "rules.yml"
    data = yaml.safe_load(DEFAULT_RULES.read_text())
    data["groups"].append({"name": "serving-lab.extra", "rules": [{"record": "lab:up:sum", "expr": "sum(up)"}]})
    extra.write_text(yaml.safe_dump(data))
    serving_lab.reload(rules=extra)
    assert loaded_rules(serving_lab)["serving-lab.extra"] == ["lab:up:sum"]
    serving_lab.reload(rules=DEFAULT_RULES)
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
