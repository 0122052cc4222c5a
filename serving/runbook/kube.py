"""Kubernetes access for the runbook: the Rollout (CustomObjectsApi, argoproj.io/v1alpha1) and the
HorizontalPodAutoscalers of its namespace (read only), through the `kubernetes` client
with a kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) or the pod's service account.

Every write is a `Patch`: `request()` is what --dry-run prints, `apply()` sends the same thing.
API errors become RefusedError naming the request and the server's Status message; a server
that does not answer becomes UnreachableError.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from serving.runbook.api import ApiRequest
from serving.runbook.errors import RefusedError, UnreachableError, UsageError

GROUP, VERSION, PLURAL = "argoproj.io", "v1alpha1", "rollouts"
MERGE_PATCH = "application/merge-patch+json"
# (connect, read) seconds per request: a runbook should say "unreachable" rather than hang.
TIMEOUT = (5.0, 30.0)

T = TypeVar("T")


@dataclass(frozen=True)
class Patch:
    """A merge patch of the Rollout `name` (of its status subresource when `subresource` is "status")."""

    name: str
    body: dict[str, Any]
    subresource: str | None = None

    def describe(self) -> str:
        target = f"Rollout {self.name}" + (f" ({self.subresource} subresource)" if self.subresource else "")
        return f"PATCH {target}"


def _load_configuration(kubeconfig: str | None, context: str | None) -> client.Configuration:
    """kubeconfig when one is given or found, else the in-cluster service account."""
    configuration = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube/config")
    try:
        if kubeconfig or context or Path(path.split(os.pathsep)[0]).exists():
            config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
        else:
            config.load_incluster_config(client_configuration=configuration)
    except (ConfigException, OSError) as exc:
        raise UsageError(f"no usable Kubernetes configuration (kubeconfig {path}, or in-cluster): {exc}") from exc
    return configuration


def _status_message(exc: ApiException) -> str:
    """The Status object's message when the body is one, else the raw body."""
    try:
        status = json.loads(exc.body or "")
    except ValueError:
        return (exc.body or "").strip() or "(no body)"
    return status.get("message", exc.body) if isinstance(status, dict) else str(status)


class Kube:
    def __init__(self, namespace: str, kubeconfig: str | None = None, context: str | None = None) -> None:
        self.namespace = namespace
        self.configuration = _load_configuration(kubeconfig, context)
        api_client = client.ApiClient(self.configuration)
        self.custom = client.CustomObjectsApi(api_client)
        self.autoscaling = client.AutoscalingV2Api(api_client)

    @property
    def host(self) -> str:
        return self.configuration.host

    def _call(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except ApiException as exc:
            raise RefusedError(
                f"{what}: the API server answered {exc.status} {exc.reason}: {_status_message(exc)}", exc.status
            ) from exc
        except urllib3.exceptions.HTTPError as exc:
            reason = getattr(exc, "reason", None) or exc
            raise UnreachableError(f"{what}: cannot reach the Kubernetes API server at {self.host}: {reason}") from exc

    def _raw(self, what: str, call: Callable[[], Any]) -> Any:
        """The server's JSON as sent (not re-serialized through the client's models)."""
        response = self._call(what, call)
        return json.loads(response.data)

    def rollout_path(self, name: str, subresource: str | None = None) -> str:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/{PLURAL}/{name}"
        return f"{path}/{subresource}" if subresource else path

    def hpa_path(self) -> str:
        return f"/apis/autoscaling/v2/namespaces/{self.namespace}/horizontalpodautoscalers"

    def get_rollout(self, name: str) -> dict[str, Any]:
        return self._call(
            f"GET Rollout {name} in namespace {self.namespace}",
            lambda: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name, _request_timeout=TIMEOUT
            ),
        )

    def list_hpas(self) -> list[dict[str, Any]]:
        listing = self._raw(
            f"GET HorizontalPodAutoscalers in namespace {self.namespace}",
            lambda: self.autoscaling.list_namespaced_horizontal_pod_autoscaler(
                self.namespace, _preload_content=False, _request_timeout=TIMEOUT
            ),
        )
        return listing.get("items") or []

    def request(self, patch: Patch) -> ApiRequest:
        path = self.rollout_path(patch.name, patch.subresource)
        return ApiRequest("PATCH", self.host + path, MERGE_PATCH, patch.body)

    def apply(self, patch: Patch) -> dict[str, Any]:
        what = f"{patch.describe()} in namespace {self.namespace} with {json.dumps(patch.body)}"
        method = (
            self.custom.patch_namespaced_custom_object_status
            if patch.subresource == "status"
            else self.custom.patch_namespaced_custom_object
        )
        return self._call(
            what,
            lambda: method(
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                patch.name,
                patch.body,
                _content_type=MERGE_PATCH,
                _request_timeout=TIMEOUT,
            ),
        )
