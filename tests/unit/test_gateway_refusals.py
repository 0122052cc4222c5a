"""serving/gateway/refusals.py: Triton's refusals, in the words tritonserver 2.51 answered with
(recorded from the real server; tests/serving_lab/test_gateway.py and test_gateway_failures.py
provoke them there)."""

from __future__ import annotations

import pytest

from serving.gateway.refusals import Kind, classify

QUEUE_FULL = "[request id: <id_unknown>] Exceeds maximum queue size"
UNREACHABLE = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: "
    "Failed to connect to remote host: Connection refused"
)


@pytest.mark.parametrize(
    ("status", "message", "past_deadline", "kind", "code"),
    [
        ("StatusCode.UNAVAILABLE", QUEUE_FULL, False, Kind.OVERLOADED, 429),
        ("StatusCode.UNAVAILABLE", "Request timeout expired", False, Kind.OVERLOADED, 429),
        ("StatusCode.UNAVAILABLE", "Request timeout expired", True, Kind.TOO_LATE, 504),
        ("StatusCode.DEADLINE_EXCEEDED", "Deadline Exceeded", True, Kind.TOO_LATE, 504),
        (
            "StatusCode.NOT_FOUND",
            "Request for unknown model: 'text-classifier' has no available versions",
            False,
            Kind.MODEL_NOT_READY,
            503,
        ),
        ("StatusCode.UNAVAILABLE", UNREACHABLE, False, Kind.UNREACHABLE, 503),
        ("StatusCode.UNAVAILABLE", "Socket closed", False, Kind.UNREACHABLE, 503),
        ("StatusCode.INVALID_ARGUMENT", "unexpected shape for input 'embedding'", False, Kind.REFUSED, 502),
        ("StatusCode.NOT_FOUND", "Request for unknown model: 'nope' is not found", False, Kind.REFUSED, 502),
        (None, "", False, Kind.REFUSED, 502),
    ],
)
def test_each_refusal_gets_its_code(
    status: str | None, message: str, past_deadline: bool, kind: Kind, code: int
) -> None:
    refusal = classify(status, message, past_deadline)
    assert (refusal.kind, refusal.code) == (kind, code)
    assert refusal.retry is (code in (429, 503))
