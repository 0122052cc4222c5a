"""The series selectors of a PromQL expression, and the metric names they read, from a real parser.

promql-parser (the Python bindings of the Rust promql-parser crate, which follows Prometheus's
grammar) parses the expression; every vector selector of its syntax tree is a metric read, with
its name (`x`, `level:metric:operations`, or `{__name__="x"}`) and its label matchers. Label
names in matchers and in `by`/`without`/`on`/`ignoring`/`group_left`/`group_right` lists,
function names, strings, numbers, durations, subqueries and `@`/`offset` modifiers are parts of
the tree, never mistaken for metrics. An expression the parser refuses is a PromQLError, and so
is a selector whose metric is not one name (`{__name__=~"a|b"}`) or that joins matchers with
`or` (Prometheus 3), which no expression here uses.

Grafana interpolates its template variables before it sends a query; `$__rate_interval`,
`$__interval` and `$__range` (also as `${...}`) stand for a duration and are read as one here.
Other variables may appear inside strings only (`model=~"$model"`), where they are text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import promql_parser

# Grafana's duration variables, replaced by a duration before parsing (their value does not change
# which metrics are read).
_GRAFANA_DURATION = re.compile(
    r"\$(?:__rate_interval|__interval|__range)\b|\$\{(?:__rate_interval|__interval|__range)\}"
)
_OPS = {
    str(promql_parser.MatchOp.Equal): "=",
    str(promql_parser.MatchOp.NotEqual): "!=",
    str(promql_parser.MatchOp.Re): "=~",
    str(promql_parser.MatchOp.NotRe): "!~",
}
NAME_LABEL = "__name__"


class PromQLError(ValueError):
    """An expression that Prometheus's grammar refuses, or whose metric cannot be named."""


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str  # =, !=, =~ or !~
    value: str


@dataclass(frozen=True)
class Selector:
    """One vector selector: the metric it reads and its other label matchers, in written order."""

    name: str
    matchers: tuple[Matcher, ...]


def _selector(selector: promql_parser.VectorSelector, expr: str) -> Selector:
    if selector.matchers.or_matchers:
        raise PromQLError(f"cannot read {expr!r}: `or` between label matchers (Prometheus 3) is not read here")
    matchers = [Matcher(m.name, _OPS[str(m.op)], m.value) for m in selector.matchers.matchers]
    named = [m for m in matchers if m.label == NAME_LABEL]
    name = selector.name
    if name is None:
        if len(named) != 1 or named[0].op != "=":
            found = ", ".join(f"{m.label}{m.op}{m.value!r}" for m in named) or "none"
            raise PromQLError(f'cannot read {expr!r}: a nameless selector needs one __name__="..." (has {found})')
        name = named[0].value
    return Selector(name, tuple(m for m in matchers if m.label != NAME_LABEL))


def parse(expr: str) -> promql_parser.Expr:
    """The expression's syntax tree, Grafana's duration variables read as a duration."""
    try:
        return promql_parser.parse(_GRAFANA_DURATION.sub("1m", expr))
    except ValueError as exc:
        raise PromQLError(f"cannot read {expr!r}: {exc}") from exc


def selectors(expr: str) -> list[Selector]:
    """Every vector selector of `expr` (also those inside range selectors and subqueries), in order."""
    found: list[promql_parser.VectorSelector] = []

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)

    promql_parser.walk(parse(expr), visit)
    return [_selector(node, expr) for node in found]


def metric_names(expr: str) -> set[str]:
    """Every metric (or recording rule) that `expr` selects."""
    return {selector.name for selector in selectors(expr)}
