"""Monitoring as code: the serving stack's recording rules, alerts, routing and dashboards.

`python -m monitoring build` writes monitoring/generated/ from monitoring/rules.py (and the
dashboards); `python -m monitoring check` proves the generated files current and runs
promtool and amtool on them (see monitoring/README.md).
"""
