"""What a cluster gets, read back from an environment's rendered deploy output (deploy/serving/<env>/),
for the serving lab to run: the PrometheusRule's groups as Prometheus' rule file, and
kube-prometheus-stack's `alertmanager.config` as Alertmanager's config.

The one change is the Secret mount: in a cluster each receiver reads its URL from a file of the
Secret alertmanager-receivers (`url_file`), which Debian 12's Alertmanager 0.25 does not read
(0.26 and later do), so the lab writes `<base URL>/<key>` in place of each file.
Everything else is the rendered text's data as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from model_repo_check.tritonserver.server import REPO
from monitoring import alerting
from monitoring.build import to_yaml

DEPLOY = REPO / "deploy/serving"
# The stack whose cluster the lab stands in for: dev (inventories/lab, CPU only).
LAB_ENV = "dev"
CHART_APP = "apps/kube-prometheus-stack.yaml"


class DeployedError(RuntimeError):
    """The rendered output lacks what a cluster would run; the message names the file."""


def _documents(env: str, pattern: str, deploy: Path) -> list[tuple[Path, dict[str, Any]]]:
    folder = deploy / env
    paths = sorted(folder.glob(pattern))
    if not paths:
        raise DeployedError(f"{folder}: no {pattern}: run `make render ENV={env}`")
    return [(path, yaml.safe_load(path.read_text(encoding="utf-8"))) for path in paths]


def rules(env: str = LAB_ENV, deploy: Path = DEPLOY) -> dict[str, Any]:
    """The rule file the environment's Prometheus loads: its PrometheusRule's spec."""
    found = [(p, doc) for p, doc in _documents(env, "manifests/*.yaml", deploy) if doc.get("kind") == "PrometheusRule"]
    if len(found) != 1:
        raise DeployedError(f"{deploy / env}/manifests: {len(found)} PrometheusRule objects, expected 1")
    return found[0][1]["spec"]


def rules_text(env: str = LAB_ENV, deploy: Path = DEPLOY) -> str:
    """rules() as the text of a rule file, written as monitoring/ writes its own."""
    return to_yaml(rules(env, deploy))


def alertmanager(env: str = LAB_ENV, deploy: Path = DEPLOY) -> tuple[dict[str, Any], list[str]]:
    """(Alertmanager config, Secrets mounted beside it) of the environment's kube-prometheus-stack."""
    ((path, app),) = _documents(env, CHART_APP, deploy)
    values = app["spec"]["source"]["helm"]["valuesObject"].get("alertmanager") or {}
    if "config" not in values:
        raise DeployedError(f"{path}: no alertmanager.config in the chart's values: the chart's default would run")
    return values["config"], list((values.get("alertmanagerSpec") or {}).get("secrets") or [])


def mounted(
    config: Mapping[str, Any], secrets: list[str], base_url: str, env: str, deploy: Path = DEPLOY
) -> dict[str, Any]:
    """The config as the lab's Alertmanager reads it: `base_url/<key>` in place of each file of
    the receivers' Secret, which must be one the chart mounts."""
    if alerting.RECEIVERS_SECRET not in secrets:
        raise DeployedError(
            f"{deploy / env / CHART_APP}: alertmanager.alertmanagerSpec.secrets does not mount "
            f"{alerting.RECEIVERS_SECRET}, whose files the receivers read"
        )
    return alerting.with_urls(config, base_url)


def write(out: Path, base_url: str, env: str = LAB_ENV, deploy: Path = DEPLOY) -> tuple[Path, Path]:
    """Write the environment's rule file and its Alertmanager config, each receiver posting to
    `base_url/<key>` (page, ticket, heartbeat), under `out`; their paths. `deploy`: the
    deploy/serving folder of another checkout (a new environment rendered in a copy)."""
    out.mkdir(parents=True, exist_ok=True)
    rule_file, config_file = out / "rules.yml", out / "alertmanager.yml"
    rule_file.write_text(rules_text(env, deploy), encoding="utf-8")
    config = mounted(*alertmanager(env, deploy), base_url, env, deploy)
    config_file.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return rule_file, config_file
