"""A live Triton through its HTTP model repository extension (POST /v2/repository/index,
POST /v2/repository/models/<name>/load|unload) and readiness endpoints (GET /v2/health/ready,
GET /v2/models/<name>[/versions/<v>]/ready). Load and unload need the server started with
--model-control-mode=explicit (the cluster's Triton is). Every action is followed by a readiness
check, polled until it holds or `timeout` passes: a load that Triton accepts but that leaves the
model (or the asked version) not ready is a failure too.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from serving.runbook.api import ApiRequest
from serving.runbook.errors import RefusedError, UnreachableError

JSON = "application/json"


class Triton:
    def __init__(self, url: str, timeout: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None) -> ApiRequest:
        return ApiRequest(method, self.url + path, JSON if body is not None else None, body)

    def send(self, request: ApiRequest) -> tuple[int, Any]:
        """(HTTP status, parsed JSON body or None); UnreachableError when nothing answers."""
        data = request.wire_body()
        http = urllib.request.Request(
            request.url,
            data=None if data is None else data.encode(),
            method=request.method,
            headers={"Content-Type": request.content_type} if request.content_type else {},
        )
        try:
            with urllib.request.urlopen(http, timeout=30) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise UnreachableError(
                f"{request.method} {request.url}: cannot reach Triton at {self.url}: {reason}"
            ) from exc
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def _checked(self, request: ApiRequest) -> Any:
        status, body = self.send(request)
        if status != 200:
            message = body.get("error", body) if isinstance(body, dict) else body
            raise RefusedError(f"{request.method} {request.url}: Triton answered {status}: {message}", status)
        return body

    def index(self) -> list[dict[str, Any]]:
        return self._checked(self.request("POST", "/v2/repository/index", {})) or []

    def server_ready(self) -> bool:
        return self.send(self.request("GET", "/v2/health/ready"))[0] == 200

    def ready(self, name: str, version: str | None = None) -> bool:
        path = f"/v2/models/{quote(name, safe='')}" + (f"/versions/{quote(version, safe='')}" if version else "")
        return self.send(self.request("GET", f"{path}/ready"))[0] == 200

    def action(self, name: str, verb: str) -> ApiRequest:
        """The load (also a reload) or unload request for a model."""
        return self.request("POST", f"/v2/repository/models/{quote(name, safe='')}/{verb}", {})

    def versions(self, name: str) -> list[dict[str, Any]]:
        return [entry for entry in self.index() if entry.get("name") == name]

    def describe(self, name: str) -> str:
        entries = self.versions(name)
        if not entries:
            return f"{name}: not in the repository index"
        parts = [
            f"version {e.get('version', '-')} {e.get('state', '?')}" + (f" ({e['reason']})" if e.get("reason") else "")
            for e in entries
        ]
        return f"{name}: " + ", ".join(parts)

    def wait(self, check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not check():
            if time.monotonic() > deadline:
                raise RefusedError(f"{what} did not hold within {self.timeout:g} s")
            time.sleep(0.2)

    def loaded(self, name: str) -> bool:
        return any(entry.get("state") == "READY" for entry in self.versions(name))

    def settled(self, name: str, states: tuple[str, ...] = ("READY", "UNAVAILABLE")) -> bool:
        """No version of the model is still LOADING or UNLOADING (Triton unloads in the background)."""
        return all(entry.get("state") in states for entry in self.versions(name))

    def load(self, name: str, version: str | None) -> None:
        self._checked(self.action(name, "load"))
        self.wait(lambda: self.ready(name), f"readiness of model {name} after load ({self.describe(name)})")
        self.wait(lambda: self.settled(name), f"versions of model {name} settled after load ({self.describe(name)})")
        if version and not self.ready(name, version):
            raise RefusedError(
                f"version {version} of model {name} is not ready after load: the model's version_policy in "
                f"config.pbtxt chooses the versions Triton loads ({self.describe(name)})"
            )

    def unload(self, name: str) -> None:
        self._checked(self.action(name, "unload"))
        # Triton unloads in the background: the request returns before the versions are UNAVAILABLE.
        self.wait(
            lambda: not self.ready(name) and self.settled(name, ("UNAVAILABLE",)),
            f"model {name} unloaded ({self.describe(name)})",
        )

    def reload(self, name: str, version: str | None) -> None:
        if not self.loaded(name):
            raise RefusedError(f"model {name} is not loaded, so there is nothing to reload: {self.describe(name)}")
        self.load(name, version)
