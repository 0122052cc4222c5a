"""What the validator reports: findings with a severity, a reason code and a location."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Location:
    """A file, and where known a 1-based line and column inside it."""

    path: Path
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        if self.line is None:
            return str(self.path)
        return f"{self.path}:{self.line}:{self.column or 1}"


@dataclass(frozen=True)
class Finding:
    severity: Severity
    code: str
    message: str
    location: Location

    def __str__(self) -> str:
        return f"{self.location}: {self.severity}: {self.message} [{self.code}]"

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = str(self.severity)
        data["location"] = {"path": str(self.location.path), "line": self.location.line, "column": self.location.column}
        data["where"] = str(self.location)
        return data


@dataclass
class Report:
    """Everything found in one repository, in the order it was found."""

    repository: Path
    release: str | None = None
    models: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def add(self, severity: Severity, code: str, message: str, location: Location) -> None:
        self.findings.append(Finding(severity, code, message, location))

    def error(self, code: str, message: str, location: Location) -> None:
        self.add(Severity.ERROR, code, message, location)

    def warning(self, code: str, message: str, location: Location) -> None:
        self.add(Severity.WARNING, code, message, location)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.WARNING]

    def failed(self, strict: bool) -> bool:
        return bool(self.errors) or (strict and bool(self.warnings))
