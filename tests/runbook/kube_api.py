"""A stand-in Kubernetes API server on loopback for the runbook's tests: no API server is reachable
on this machine, so the recorded objects under fixtures/ are served on the paths the `kubernetes`
client uses, and every request is recorded (method, path, query, Content-Type, Authorization, body).

It does what the runbook relies on, as the API server does it: GET of a Rollout, merge patches
(RFC 7386) of the Rollout and of its `status` subresource (each changes only its own part), JSON
patches (RFC 6902 `replace`/`add`) of the Rollout, lists of ReplicaSets filtered by an equality
label selector, list and merge patch of HorizontalPodAutoscalers; errors are Status objects with
the API server's messages (404 NotFound, 403 Forbidden, 415 for another patch type).
"""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from model_repo_check.tritonserver.processes import LOOPBACK

FIXTURES = Path(__file__).with_name("fixtures")
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
TOKEN = "recorded-token"


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str | None
    authorization: str | None
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902, the two operations an undo sends."""
    result = copy.deepcopy(target)
    for operation in operations:
        if operation["op"] not in ("replace", "add"):
            raise ValueError(f"unsupported op {operation['op']}")
        *parents, last = [part.replace("~1", "/").replace("~0", "~") for part in operation["path"].split("/")[1:]]
        node = result
        for part in parents:
            node = node[part]
        if operation["op"] == "replace" and last not in node:
            raise ValueError(f"replace of missing path {operation['path']}")
        node[last] = copy.deepcopy(operation["value"])
    return result


def status_object(code: int, reason: str, message: str, kind: str, name: str, group: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {"name": name, "group": group, "kind": kind},
        "code": code,
    }


@dataclass
class KubeApi:
    """`with KubeApi() as api:` serves until the block ends. Put objects in `rollouts`,
    `replicasets`, `hpas` (by name; namespace `triton`); `forbidden` holds (method, path) pairs
    answered 403; `status_subresource=False` answers 404 on .../status, as Rollouts v0.9 did."""

    namespace: str = "triton"
    rollouts: dict[str, dict[str, Any]] = field(default_factory=dict)
    replicasets: list[dict[str, Any]] = field(default_factory=list)
    hpas: dict[str, dict[str, Any]] = field(default_factory=dict)
    forbidden: set[tuple[str, str]] = field(default_factory=set)
    status_subresource: bool = True
    requests: list[Recorded] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the API stand-in is not started")
        return f"http://{LOOPBACK}:{self._server.server_address[1]}"

    def writes(self) -> list[Recorded]:
        return [r for r in self.requests if r.method != "GET"]

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig that points the client at this server with a bearer token."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "recorded", "cluster": {"server": self.url}}],
            "users": [{"name": "runbook", "user": {"token": TOKEN}}],
            "contexts": [
                {"name": "recorded", "context": {"cluster": "recorded", "user": "runbook", "namespace": self.namespace}}
            ],
            "current-context": "recorded",
        }
        path.write_text(json.dumps(config))  # JSON is YAML
        return path

    def __enter__(self) -> KubeApi:
        self._server = ThreadingHTTPServer((LOOPBACK, 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def answer(self, method: str, path: str, query: dict[str, list[str]], content_type: str | None, body: bytes):
        """(HTTP status, JSON answer) for one request."""
        ns = f"/namespaces/{self.namespace}"
        rollouts = f"/apis/argoproj.io/v1alpha1{ns}/rollouts/"
        hpas = f"/apis/autoscaling/v2{ns}/horizontalpodautoscalers"
        if (method, path) in self.forbidden:
            # /apis/<group>/<version>/namespaces/<ns>/<resource>[/<name>[/<subresource>]]
            group, _, _, _, resource, *rest = path.removeprefix("/apis/").split("/")
            name, sub = [*rest, "", ""][:2]
            verb = {"GET": "get" if name else "list", "PATCH": "patch"}[method]
            target = f'{resource}.{group} "{name}"' if name else resource + "." + group
            message = (
                f'{target} is forbidden: User "system:serviceaccount:triton:runbook" cannot {verb} resource '
                f'"{resource}{"/" + sub if sub else ""}" in API group "{group}" in the namespace "{self.namespace}"'
            )
            return 403, status_object(403, "Forbidden", message, resource, name, group)
        if path.startswith(rollouts):
            name, _, sub = path.removeprefix(rollouts).partition("/")
            missing = (
                404,
                status_object(
                    404, "NotFound", f'rollouts.argoproj.io "{name}" not found', "rollouts", name, "argoproj.io"
                ),
            )
            if sub not in ("", "status") or (sub == "status" and not self.status_subresource):
                return 404, status_object(
                    404, "NotFound", "the server could not find the requested resource", "", "", ""
                )
            if name not in self.rollouts:
                return missing
            if method == "GET":
                return 200, self.rollouts[name]
            return self._patch_rollout(name, sub, content_type, body)
        if path == f"/apis/apps/v1{ns}/replicasets" and method == "GET":
            selector = query.get("labelSelector", [""])[0]
            wanted = dict(term.split("=", 1) for term in selector.split(",") if term)
            items = [
                rs
                for rs in self.replicasets
                if all(rs["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())
            ]
            return 200, {"kind": "ReplicaSetList", "apiVersion": "apps/v1", "metadata": {}, "items": items}
        if path == hpas and method == "GET":
            items = list(self.hpas.values())
            return 200, {"kind": "HorizontalPodAutoscalerList", "apiVersion": "autoscaling/v2", "items": items}
        if path.startswith(hpas + "/") and method == "PATCH":
            name = path.rsplit("/", 1)[-1]
            if name not in self.hpas:
                message = f'horizontalpodautoscalers.autoscaling "{name}" not found'
                return 404, status_object(404, "NotFound", message, "horizontalpodautoscalers", name, "autoscaling")
            if content_type != MERGE_PATCH:
                return 415, status_object(415, "UnsupportedMediaType", f"{content_type} is not supported", "", "", "")
            self.hpas[name] = merge_patch(self.hpas[name], json.loads(body))
            return 200, self.hpas[name]
        return 404, status_object(404, "NotFound", "the server could not find the requested resource", "", "", "")

    def _patch_rollout(self, name: str, sub: str, content_type: str | None, body: bytes):
        current = self.rollouts[name]
        patch = json.loads(body)
        if content_type == MERGE_PATCH:
            patched = merge_patch(current, patch)
        elif content_type == JSON_PATCH and not sub:
            try:
                patched = json_patch(current, patch)
            except (KeyError, ValueError) as exc:
                return 422, status_object(422, "Invalid", f"the JSON patch failed: {exc}", "rollouts", name, "")
        else:
            message = f"the body of the request was in an unknown format - accepted media types include: {MERGE_PATCH}"
            return 415, status_object(415, "UnsupportedMediaType", message, "", "", "")
        # With the status subresource, the object's PATCH keeps the status and /status keeps the rest.
        if sub == "status":
            updated = {**current, "status": patched.get("status", {})}
        else:
            updated = {**patched, "status": current.get("status", {})}
        updated["metadata"] = {
            **updated["metadata"],
            "resourceVersion": str(int(current["metadata"]["resourceVersion"]) + 1),
        }
        self.rollouts[name] = updated
        return 200, updated


def _handler(api: KubeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            url = urlsplit(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            query = parse_qs(url.query)
            content_type = self.headers.get("Content-Type")
            api.requests.append(
                Recorded(self.command, url.path, query, content_type, self.headers.get("Authorization"), body)
            )
            code, answer = api.answer(self.command, url.path, query, content_type, body)
            data = json.dumps(answer).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = _serve

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler
