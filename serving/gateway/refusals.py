"""What a failed gRPC inference call means for the client: Triton's refusals by status and message.

Read from tritonserver 2.51 (24.10) itself, with a model whose queue policy was full or timed out,
a model unloaded and a port with no server:

| gRPC status, message | meaning | HTTP |
| --- | --- | --- |
| UNAVAILABLE, `Exceeds maximum queue size` | the model's queue is full | 429, that model only |
| UNAVAILABLE, `Request timeout expired` | the queue policy dropped it; before the deadline: overload | 429 |
| UNAVAILABLE, `Request timeout expired` at or past the gateway's deadline | too late | 504 |
| DEADLINE_EXCEEDED | the gRPC deadline passed | 504 |
| NOT_FOUND, `... has no available versions` | the model is not loaded (unloaded, loading) | 503, that model |
| UNAVAILABLE, anything else (`failed to connect to all addresses`, ...) | Triton unreachable | 503 |
| anything else | Triton refused the request | 502 |

Both 429 and 503 carry `Retry-After`. Only "unreachable" says anything about Triton as a whole:
the readiness probe, not one request, decides whether the gateway stays in the Service.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

QUEUE_FULL = "Exceeds maximum queue size"
QUEUE_TIMEOUT = "Request timeout expired"
NOT_LOADED = "has no available versions"


class Kind(Enum):
    OVERLOADED = "triton_overloaded"
    TOO_LATE = "deadline"
    MODEL_NOT_READY = "model_not_ready"
    UNREACHABLE = "triton_unreachable"
    REFUSED = "triton_refused"


HTTP_CODE = {
    Kind.OVERLOADED: 429,
    Kind.TOO_LATE: 504,
    Kind.MODEL_NOT_READY: 503,
    Kind.UNREACHABLE: 503,
    Kind.REFUSED: 502,
}


@dataclass(frozen=True)
class Refusal:
    kind: Kind
    status: str  # the gRPC status code's name, e.g. UNAVAILABLE
    message: str  # Triton's (or gRPC's) own words

    @property
    def code(self) -> int:
        return HTTP_CODE[self.kind]

    @property
    def retry(self) -> bool:
        return self.code in (429, 503)


def classify(status: str | None, message: str, past_deadline: bool) -> Refusal:
    """The refusal of one inference call; `past_deadline`: the gateway's deadline has passed."""
    name = (status or "").removeprefix("StatusCode.")
    if name == "DEADLINE_EXCEEDED" or (name == "UNAVAILABLE" and QUEUE_TIMEOUT in message and past_deadline):
        return Refusal(Kind.TOO_LATE, name, message)
    if name == "UNAVAILABLE" and (QUEUE_FULL in message or QUEUE_TIMEOUT in message):
        return Refusal(Kind.OVERLOADED, name, message)
    if name == "NOT_FOUND" and NOT_LOADED in message:
        return Refusal(Kind.MODEL_NOT_READY, name, message)
    if name == "UNAVAILABLE":
        return Refusal(Kind.UNREACHABLE, name, message)
    return Refusal(Kind.REFUSED, name, message)
