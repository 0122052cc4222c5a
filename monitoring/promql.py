"""The metric names a PromQL expression reads, from a small tokenizer (no PromQL parser needed).

An identifier is a metric name unless it calls a function or an aggregation (it is followed by
`(`, or by `by`/`without`), is a keyword (`and`, `offset`, `bool`, ...), or names labels (inside `{...}`, or the list
after `by`, `without`, `on`, `ignoring`, `group_left`, `group_right`). `{__name__="x"}` reads x.
Strings, numbers, durations, ranges and subqueries (`[5m:1m]`), `@` modifiers and Grafana's
template variables (`$model`, `${model}`, `[[model]]`, `$__rate_interval`) are skipped.
Recording-rule names (`level:metric:operations`) are metric names like any other.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

_TOKENS = re.compile(
    r"""
    (?P<skip>\s+|\#[^\n]*)
  | (?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|`[^`]*`)
  | (?P<duration>(?:\d+(?:ms|[smhdwy]))+\b)
  | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<variable>\$\{[^}]*\}|\$\w+|\[\[[\w:.]+\]\])
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=,(){}\[\]@:])
    """,
    re.VERBOSE,
)
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"})
LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_CLOSING = {"(": ")", "{": "}", "[": "]"}


class PromQLError(ValueError):
    """An expression that cannot be read: an unknown character, an unterminated string or bracket."""


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    position: int


def tokens(expr: str) -> list[Token]:
    found: list[Token] = []
    position = 0
    while position < len(expr):
        match = _TOKENS.match(expr, position)
        if match is None:
            raise PromQLError(f"cannot read {expr[position : position + 20]!r} at offset {position} of {expr!r}")
        kind = match.lastgroup or ""
        if kind != "skip":
            found.append(Token(kind, match.group(), position))
        position = match.end()
    return found


def _unquote(text: str) -> str:
    body = text[1:-1]
    return body if text[0] == "`" else re.sub(r"\\(.)", r"\1", body)


def _group(items: list[Token], start: int) -> int:
    """The index of the bracket that closes the one at `start`."""
    depth = 0
    for index in range(start, len(items)):
        text = items[index].text
        if items[index].kind == "op" and text in _CLOSING:
            depth += 1
        elif items[index].kind == "op" and text in _CLOSING.values():
            depth -= 1
            if depth == 0:
                if text != _CLOSING[items[start].text]:
                    raise PromQLError(f"{items[start].text!r} at offset {items[start].position} closed by {text!r}")
                return index
    raise PromQLError(f"unclosed {items[start].text!r} at offset {items[start].position}")


def _selector_names(items: list[Token]) -> Iterator[str]:
    """Metric names given as `__name__="x"` inside a label matcher block."""
    for index in range(len(items) - 2):
        name, op, value = items[index : index + 3]
        if name.text == "__name__" and op.text == "=" and value.kind == "string":
            yield _unquote(value.text)


def metric_names(expr: str) -> set[str]:
    """Every metric (or recording rule) that `expr` selects."""
    items = tokens(expr)
    names: set[str] = set()
    index = 0
    while index < len(items):
        token = items[index]
        following = items[index + 1] if index + 1 < len(items) else None
        # A function call, or an aggregation with its clause first: `sum by (model) (...)`.
        calls = following is not None and (following.text == "(" or following.text.lower() in ("by", "without"))
        if token.kind == "op" and token.text in ("{", "["):
            end = _group(items, index)
            if token.text == "{":
                names.update(_selector_names(items[index + 1 : end]))
            index = end
        elif token.kind == "ident" and token.text.lower() in LABEL_LISTS:
            index = _group(items, index + 1) if calls else index
        elif token.kind == "ident" and not calls and token.text.lower() not in KEYWORDS:
            names.add(token.text)
        index += 1
    return names
