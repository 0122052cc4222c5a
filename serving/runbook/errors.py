"""The runbook's failures and their exit codes: 2 when the command could not be asked (bad usage,
a kubeconfig that does not load, a server that cannot be reached), 1 when it was asked and refused
(an API error answer, a Triton load that fails, a readiness check that does not hold)."""

from __future__ import annotations


class RunbookError(Exception):
    exit_code = 1


class UsageError(RunbookError):
    """Bad arguments or configuration: nothing was sent."""

    exit_code = 2


class UnreachableError(RunbookError):
    """The server did not answer at all."""

    exit_code = 2


class RefusedError(RunbookError):
    """The server answered with an error (`status` is its HTTP status), or the result was wrong."""

    exit_code = 1

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
