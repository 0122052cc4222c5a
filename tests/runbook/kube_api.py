"""A stand-in Kubernetes API server on loopback for the runbook's tests: no API server is reachable
on this machine, so the recorded objects under fixtures/ are served on the paths the `kubernetes`
client uses, and every request is recorded (method, path, Content-Type, Authorization, body).

It does what the runbook relies on, as the API server does it: GET of a Rollout, merge patches
(RFC 7386) of the Rollout and of its `status` subresource (each changes only its own part), the
list of HorizontalPodAutoscalers; errors are Status objects with the API server's messages (404
NotFound, 403 Forbidden, 415 for another patch type).
"""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from model_repo_check.tritonserver.processes import LOOPBACK

FIXTURES = Path(__file__).with_name("fixtures")
MERGE_PATCH = "application/merge-patch+json"
TOKEN = "recorded-token"


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
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
    """`with KubeApi() as api:` serves until the block ends. Put objects in `rollouts` and `hpas`
    (by name; namespace `triton`); `forbidden` holds (method, path) pairs
    answered 403; `status_subresource=False` answers 404 on .../status, as Rollouts v0.9 did."""

    namespace: str = "triton"
    rollouts: dict[str, dict[str, Any]] = field(default_factory=dict)
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

    def answer(self, method: str, path: str, content_type: str | None, body: bytes):
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
        if path == hpas and method == "GET":
            items = list(self.hpas.values())
            return 200, {"kind": "HorizontalPodAutoscalerList", "apiVersion": "autoscaling/v2", "items": items}
        return 404, status_object(404, "NotFound", "the server could not find the requested resource", "", "", "")

    def _patch_rollout(self, name: str, sub: str, content_type: str | None, body: bytes):
        current = self.rollouts[name]
        if content_type != MERGE_PATCH:
            message = f"the body of the request was in an unknown format - accepted media types include: {MERGE_PATCH}"
            return 415, status_object(415, "UnsupportedMediaType", message, "", "", "")
        patched = merge_patch(current, json.loads(body))
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
            content_type = self.headers.get("Content-Type")
            api.requests.append(Recorded(self.command, url.path, content_type, self.headers.get("Authorization"), body))
            code, answer = api.answer(self.command, url.path, content_type, body)
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
