"""config.pbtxt: parse it with the schema of its Triton release, and find where each field was written.

Parsing goes through protobuf's `text_format` and the `inference.ModelConfig` of that release's
model_config.proto (model_repo_check/release_schema.py), the schema that release loads. A field
or enum value the release does not know is a parse error naming the release (and the release
that brought it, where a newer one in the platform matrix has it). A parse error keeps
protobuf's line and column; the message gets a hint for the mistakes people make most. The
parsed config is handed to the rules as the installed tritonclient's `ModelConfig`.

`FieldLocations` indexes the (already parsed) text so later checks can point at the line
of the field they complain about: `locations.find("input", 0, "dims")`.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from model_repo_check.findings import Location
from model_repo_check.release_schema import ReleaseSchema, first_release_with, load_schema, newest_release

ModelConfig = model_config_pb2.ModelConfig
DATA_TYPES = tuple(v.name for v in model_config_pb2.DataType.DESCRIPTOR.values)
_ERROR_PREFIX = re.compile(r"^\d+:\d+ : (?:'.*?': )?", re.DOTALL)
_UNKNOWN_FIELD = re.compile(r'Message type "([\w.]+)" has no field named "(\w+)"')
_UNKNOWN_ENUM = re.compile(r'Enum type "([\w.]+)" has no value named (\w+)')


class ConfigParseError(Exception):
    """config.pbtxt does not parse with the Triton schema; carries the protobuf location."""

    def __init__(self, location: Location, message: str) -> None:
        self.location = location
        self.message = message
        super().__init__(f"{location}: {message}")


def parse_config(
    path: Path, schema: ReleaseSchema | None = None
) -> tuple[model_config_pb2.ModelConfig, FieldLocations]:
    """Parse with `schema` (default: the newest release of the platform matrix)."""
    schema = schema or load_schema(newest_release())
    text = path.read_text(encoding="utf-8")
    try:
        parsed = text_format.Parse(text, schema.model_config())
    except text_format.ParseError as err:
        line, column = err.GetLine(), err.GetColumn()
        source_line = text.splitlines()[line - 1] if 0 < line <= len(text.splitlines()) else ""
        raise ConfigParseError(Location(path, line, column), _explain(str(err), source_line, column, schema)) from None
    return ModelConfig.FromString(parsed.SerializeToString()), FieldLocations.index(path, text)


def _explain(raw: str, source_line: str, column: int, schema: ReleaseSchema) -> str:
    """protobuf's message without its position prefix, plus a hint where we recognise the mistake."""
    message = _ERROR_PREFIX.sub("", raw, count=1)
    before = source_line[: max(column - 1, 0)].rstrip()
    at = source_line[column - 1 : column] if column > 0 else ""
    if message == 'Expected "{".' and at == "[":
        if before.endswith("["):
            return f"{message} Nested brackets: a repeated field is written `{before[:-1].strip()} [ {{ ... }} ]`."
        field_name = before.split()[-1].rstrip(":") if before.split() else "this field"
        return f"{message} `{field_name}` is a single message, not a list: write `{field_name} {{ ... }}`."
    if message == 'Expected ",".':
        return f"{message} Elements of a list are separated by commas: `[ {{ ... }}, {{ ... }} ]`."
    if message == 'Expected ":".':
        return f"{message} A scalar field is written `name: value`, a list of scalars `name: [ ... ]`."
    if match := _UNKNOWN_FIELD.search(message):
        return _unknown_field(message, match.group(1), match.group(2), schema)
    if match := _UNKNOWN_ENUM.search(message):
        values = _enum_names(schema, match.group(1))
        if match.group(2).upper() in DATA_TYPES + values:
            return f"{message} Enum values are case sensitive: write {match.group(2).upper()}."
        return f"{message} {schema.label} has no such value."
    return message


def _unknown_field(message: str, message_name: str, field_name: str, schema: ReleaseSchema) -> str:
    short = message_name.removeprefix("inference.")
    newer = first_release_with(message_name, field_name, schema.release)
    if newer is not None:
        return (
            f"{field_name} is not a field of {short} in {schema.label}; it arrived later, in {newer.label}: "
            f"deploy that release to this environment first, or leave the field out"
        )
    if field_name in _installed_field_names(message_name):
        return (
            f"{field_name} is not a field of {short} in {schema.label}; it arrived later, in a release "
            f"newer than any in platform_matrix/matrix.yml (the installed tritonclient knows it)"
        )
    found = schema.message_descriptor(message_name)
    close = difflib.get_close_matches(field_name, list(found.fields_by_name) if found else [], n=1)
    hint = f" Did you mean `{close[0]}`?" if close else ""
    return f"{message} The schema of {schema.label} has no such field.{hint}"


def _installed_field_names(message_name: str) -> set[str]:
    try:
        found = model_config_pb2.DESCRIPTOR.pool.FindMessageTypeByName(message_name)
    except KeyError:
        return set()
    return set(found.fields_by_name)


def _enum_names(schema: ReleaseSchema, enum_full_name: str) -> tuple[str, ...]:
    found = schema.enum_descriptor(enum_full_name)
    return tuple(v.name for v in found.values) if found else ()


_TOKEN = re.compile(
    r"""(?P<space>\s+)
      | (?P<comment>\#[^\n]*)
      | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
      | (?P<word>[\w.+\-]+)
      | (?P<punct>[{}\[\]<>:,;])""",
    re.VERBOSE,
)
_OPEN = {"{": "}", "<": ">"}


@dataclass(frozen=True)
class _Token:
    text: str
    line: int
    column: int


def _tokens(text: str) -> list[_Token]:
    tokens, line, line_start = [], 1, 0
    for match in _TOKEN.finditer(text):
        kind, value = match.lastgroup, match.group()
        if kind not in ("space", "comment"):
            tokens.append(_Token(value, line, match.start() - line_start + 1))
        if "\n" in value:
            line += value.count("\n")
            line_start = match.start() + value.rindex("\n") + 1
    return tokens


FieldPath = tuple[tuple[str, int], ...]


@dataclass
class FieldLocations:
    """Where each field occurrence starts, keyed by (field, index) pairs from the top.

    The text is indexed on the first `find`: most configs are clean and never asked."""

    path: Path
    text: str
    _positions: dict[FieldPath, tuple[int, int]] | None = field(default=None, repr=False)

    @classmethod
    def index(cls, path: Path, text: str) -> FieldLocations:
        return cls(path, text)

    @property
    def positions(self) -> dict[FieldPath, tuple[int, int]]:
        if self._positions is None:
            self._positions = {}
            self._message(_tokens(self.text), 0, (), None)
        return self._positions

    def _message(self, tokens: list[_Token], i: int, prefix: FieldPath, close: str | None) -> int:
        counts: dict[str, int] = {}
        while i < len(tokens) and tokens[i].text != close:
            name = tokens[i]
            i += 1
            if i < len(tokens) and tokens[i].text == ":":
                i += 1
            first = counts.get(name.text, 0)
            if i < len(tokens) and tokens[i].text == "[":
                i += 1
                while i < len(tokens) and tokens[i].text != "]":
                    i = self._value(tokens, i, prefix, name, counts)
                    if i < len(tokens) and tokens[i].text == ",":
                        i += 1
                i += 1
            else:
                i = self._value(tokens, i, prefix, name, counts)
            self.positions.setdefault((*prefix, (name.text, first)), (name.line, name.column))
            if i < len(tokens) and tokens[i].text in ",;":
                i += 1
        return i + 1

    def _value(self, tokens: list[_Token], i: int, prefix: FieldPath, name: _Token, counts: dict[str, int]) -> int:
        index = counts.get(name.text, 0)
        counts[name.text] = index + 1
        here = (*prefix, (name.text, index))
        self.positions.setdefault(here, (name.line, name.column))
        if i < len(tokens) and tokens[i].text in _OPEN:
            return self._message(tokens, i + 1, here, _OPEN[tokens[i].text])
        i += 1
        while i < len(tokens) and tokens[i].text[:1] in "\"'" and tokens[i - 1].text[:1] in "\"'":
            i += 1
        return i

    def find(self, *parts: str | int) -> Location:
        """The location of the deepest written field along `parts`; the file itself if none was written."""
        path: list[tuple[str, int]] = []
        for part in parts:
            if isinstance(part, int):
                path[-1] = (path[-1][0], part)
            else:
                path.append((part, 0))
        while path:
            if (hit := self.positions.get(tuple(path))) is not None:
                return Location(self.path, *hit)
            path.pop()
        return Location(self.path)
