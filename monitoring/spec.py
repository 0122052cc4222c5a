"""Rule building blocks, and what every rule file must hold beyond what promtool checks.

`record()` and `alert()` build the plain dicts of a Prometheus rule file; `problems()` reads a
rule file's document (generated or not) and names the file, group and rule of each problem:
an alert without a `severity` of page or ticket (the heartbeat Watchdog: none), without
`summary`, `description` (quoting `$value` and `$labels`) or a `runbook_url` that points at a
section of monitoring/runbook.md.
"""

from __future__ import annotations

import copy
import re
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

Rule = dict[str, Any]
Group = dict[str, Any]

SEVERITIES = ("page", "ticket")
# The alert that always fires; its notifications are the heartbeat (monitoring/alertmanager.yml
# routes it to the heartbeat receiver). Severity "none", as kube-prometheus-stack's own Watchdog.
HEARTBEAT_ALERT = "Watchdog"
HEARTBEAT_SEVERITY = "none"
RUNBOOK = Path(__file__).resolve().parent / "runbook.md"
# The runbook links of the rules as generated here (promtool's tests, `python -m monitoring`); each
# environment's render puts its own runbook in their place (with_runbook; gpu_serving's monitoring.runbookURL).
REPOSITORY_URL = "https://git.example.com/platform/gpu-serving-iac"
RUNBOOK_URL = f"{REPOSITORY_URL}/blob/main/monitoring/runbook.md"
_HEADING = re.compile(r"^#{2,3} +(.+?) *$", re.MULTILINE)


def _expr(text: str) -> str:
    return textwrap.dedent(text).strip()


def anchor(heading: str) -> str:
    """The anchor that GitHub and GitLab give a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def runbook_url(alert_name: str) -> str:
    return f"{RUNBOOK_URL}#{anchor(alert_name)}"


def group(name: str, *rules: Rule) -> Group:
    return {"name": name, "rules": list(rules)}


def record(name: str, expr: str) -> Rule:
    return {"record": name, "expr": _expr(expr)}


def alert(
    name: str,
    expr: str,
    *,
    for_: str,
    severity: str,
    summary: str,
    description: str,
    labels: Mapping[str, str] | None = None,
) -> Rule:
    rule: Rule = {"alert": name, "expr": _expr(expr)}
    if for_ != "0m":
        rule["for"] = for_
    rule["labels"] = {"severity": severity, **(labels or {})}
    rule["annotations"] = {
        "summary": summary,
        "description": " ".join(description.split()),
        "runbook_url": runbook_url(name),
    }
    return rule


def with_runbook(document: Mapping[str, Any], runbook: str) -> dict[str, Any]:
    """A rule document whose every runbook_url points at the same section of `runbook` (an
    environment's URL of monitoring/runbook.md) instead of RUNBOOK_URL."""
    result = copy.deepcopy(dict(document))
    for rule_group in result["groups"]:
        for rule in rule_group["rules"]:
            annotations = rule.get("annotations") or {}
            if "runbook_url" in annotations:
                base, _, fragment = annotations["runbook_url"].partition("#")
                if base != RUNBOOK_URL:
                    raise ValueError(f"alert {rule.get('alert')!r}: runbook_url {base!r} is not {RUNBOOK_URL}")
                annotations["runbook_url"] = f"{runbook}#{fragment}"
    return result


def runbook_anchors(runbook: Path = RUNBOOK) -> set[str]:
    return {anchor(heading) for heading in _HEADING.findall(runbook.read_text(encoding="utf-8"))}


def _alert_problems(rule: Rule, anchors: set[str]) -> Iterator[str]:
    labels = rule.get("labels") or {}
    annotations = rule.get("annotations") or {}
    if rule.get("alert") == HEARTBEAT_ALERT:
        if labels.get("severity") != HEARTBEAT_SEVERITY:
            yield f"is the heartbeat: its severity must be {HEARTBEAT_SEVERITY} (labels: {dict(labels)})"
    elif labels.get("severity") not in SEVERITIES:
        yield f"has no severity label of {' or '.join(SEVERITIES)} (labels: {dict(labels)})"
    for key in ("summary", "description", "runbook_url"):
        if not str(annotations.get(key, "")).strip():
            yield f"has no {key} annotation"
    description = str(annotations.get("description", ""))
    if description and not ("$value" in description and "$labels" in description):
        yield "description quotes neither {{ $value }} nor {{ $labels.* }}: say what fired, and where"
    url = str(annotations.get("runbook_url", ""))
    base, _, fragment = url.partition("#")
    if url and (base != RUNBOOK_URL or fragment not in anchors):
        yield f"runbook_url {url!r} is not a section of {RUNBOOK_URL} (monitoring/runbook.md headings)"


def problems(document: Any, source: str, runbook: Path = RUNBOOK) -> list[str]:
    """Every problem of a rule file's parsed YAML, each starting with `source: group ...: rule`."""
    if not isinstance(document, Mapping) or not isinstance(document.get("groups"), list):
        return [f"{source}: not a Prometheus rule file (no `groups:` list)"]
    anchors = runbook_anchors(runbook)
    found = []
    for rule_group in document["groups"]:
        name = rule_group.get("name") if isinstance(rule_group, Mapping) else None
        for index, rule in enumerate(rule_group.get("rules") or [] if name else []):
            if "alert" in rule:
                where = f"{source}: group {name!r}: alert {rule['alert']!r}"
                found += [f"{where} {problem}" for problem in _alert_problems(rule, anchors)]
            elif "record" not in rule:
                found.append(f"{source}: group {name!r}: rule {index} is neither an alert nor a record")
    return found
