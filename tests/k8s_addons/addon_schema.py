"""Schema checks: Kubernetes' own OpenAPI schemas, and the Prometheus Operator CRD for ServiceMonitors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kubernetes_validate
from cloudcoil.models.prometheus_operator.v1 import ServiceMonitor
from pydantic import ValidationError

CRD_MODELS = {("monitoring.coreos.com/v1", "ServiceMonitor"): ServiceMonitor}


def kubernetes_errors(obj: dict[str, Any], version: str) -> list[str]:
    """kubernetes-validate --strict for a built-in kind: unknown fields are errors too."""
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{'.'.join(str(p) for p in error.path)}: {error.message}"]
    return []


def _dropped(original: Any, parsed: Any, path: str) -> Iterator[str]:
    """Keys in `original` that the model did not keep: fields the CRD schema does not have."""
    if isinstance(original, dict):
        for key, value in original.items():
            if not isinstance(parsed, dict) or key not in parsed:
                yield f"{path}.{key}".lstrip(".")
            else:
                yield from _dropped(value, parsed[key], f"{path}.{key}")
    elif isinstance(original, list):
        for index, (item, kept) in enumerate(zip(original, parsed, strict=True)):
            yield from _dropped(item, kept, f"{path}[{index}]")


def crd_errors(obj: dict[str, Any]) -> list[str]:
    """Validate a CRD-based object against its CRD's model, strictly (no unknown fields)."""
    model = CRD_MODELS[(obj["apiVersion"], obj["kind"])]
    try:
        parsed = model.model_validate(obj).model_dump(mode="json", by_alias=True, exclude_unset=True)
    except ValidationError as error:
        return [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()]
    return [f"{path}: unknown field" for path in _dropped(obj, parsed, "")]


def is_crd_kind(obj: dict[str, Any]) -> bool:
    return (obj["apiVersion"], obj["kind"]) in CRD_MODELS
