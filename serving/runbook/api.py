"""One HTTP request as the runbook sends it: what --dry-run prints instead of sending."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ApiRequest:
    method: str
    url: str
    content_type: str | None = None
    body: Any = None

    def wire_body(self) -> str | None:
        """The body as it goes on the wire (both clients serialize with json.dumps' defaults)."""
        return None if self.body is None else json.dumps(self.body)

    def render(self) -> str:
        lines = [f"{self.method} {self.url}"]
        if self.content_type:
            lines.append(f"Content-Type: {self.content_type}")
        if (body := self.wire_body()) is not None:
            lines += ["", body]
        return "\n".join(lines)
