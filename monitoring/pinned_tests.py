"""The promtool tests whose input series carry a pinned version: generated, so that the driver
pin stays written in platform_matrix/matrix.yml only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from monitoring import rules, spec

ALERT = "GpuDriverVersionDrift"


def _temperature(node: str, driver: str) -> dict[str, str]:
    return {
        "series": f'DCGM_FI_DEV_GPU_TEMP{{node="{node}", gpu="0", DCGM_FI_DRIVER_VERSION="{driver}"}}',
        "values": "50x180",
    }


def document(rule_file: Path) -> dict[str, Any]:
    pin = rules.driver_pin()
    other = f"{int(pin.split('.')[0]) + 10}.0"  # any driver but the pin
    annotations = {
        "summary": "A node runs another NVIDIA driver than the platform matrix pins.",
        "description": f"gpu-b runs driver {other} on 1 GPU(s); platform_matrix/matrix.yml pins {pin}.",
        "runbook_url": spec.runbook_url(ALERT),
    }
    return {
        "rule_files": [rule_file.as_posix()],
        "evaluation_interval": "1m",
        "group_eval_order": [group["name"] for group in rules.groups()],
        "tests": [
            {
                "name": f"{ALERT}: a node off the pin for an hour",
                "interval": "1m",
                "input_series": [_temperature("gpu-a", pin), _temperature("gpu-b", other)],
                "alert_rule_test": [
                    {"eval_time": "59m", "alertname": ALERT, "exp_alerts": []},
                    {
                        "eval_time": "2h",
                        "alertname": ALERT,
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "ticket", "node": "gpu-b", "DCGM_FI_DRIVER_VERSION": other},
                                "exp_annotations": annotations,
                            }
                        ],
                    },
                ],
            },
            {
                "name": f"{ALERT}: every node on the pin",
                "interval": "1m",
                "input_series": [_temperature("gpu-a", pin), _temperature("gpu-c", pin)],
                "alert_rule_test": [{"eval_time": "3h", "alertname": ALERT, "exp_alerts": []}],
            },
        ],
    }
