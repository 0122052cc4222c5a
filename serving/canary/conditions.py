"""Argo Rollouts' successCondition / failureCondition, evaluated without eval().

Argo Rollouts compiles each condition with expr-lang (github.com/expr-lang/expr) in an
environment of `result` (a Prometheus vector arrives as a list of floats) and the functions
`isNaN`, `isInf`, `asInt`, `asFloat`. This module evaluates the subset the templates of
pulumi/gpu_serving/analysis.py use, with the same meaning:

- `&&`, `||` (short-circuit, like expr-lang's), `!`, `==`, `!=`, `<`, `<=`, `>`, `>=`, `+`, `-`,
  `*`, `/`, parentheses, numeric literals;
- `result`, `result[i]` (an index past the end is an error, as in expr-lang: Argo then marks the
  measurement Error, which is why the templates guard it with `len(result) == 1 && ...`);
- `len(x)`, `isNaN(x)`, `isInf(x)`.

The text is translated token by token (`&&` -> `and`, `||` -> `or`, `!` -> `not`) and parsed with
Python's `ast`; only the node types above are accepted, anything else is a ConditionError naming
the construct. Comparisons with NaN are false, as in Go.
"""

from __future__ import annotations

import ast
import io
import math
import operator
import tokenize
from collections.abc import Callable, Sequence
from typing import Any

Result = float | Sequence[float]


class ConditionError(ValueError):
    """A condition outside the supported subset, or one that fails at run time (like expr-lang)."""


_FUNCTIONS: dict[str, Callable[[Any], Any]] = {"len": len, "isNaN": math.isnan, "isInf": math.isinf}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_ARITHMETIC: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_WORDS = {"&&": "and", "||": "or", "!": "not"}


def _translate(condition: str) -> str:
    """expr-lang's logical operators to Python's; `!=` stays, a lone `!` becomes `not`."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(condition).readline))
    except (tokenize.TokenError, SyntaxError) as exc:
        raise ConditionError(f"{condition!r}: {exc}") from exc
    out: list[str] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        text = token.string
        following = tokens[index + 1].string if index + 1 < len(tokens) else ""
        if text in ("&", "|") and following == text:  # Python tokenizes `&&` as two `&`
            out.append(f" {_WORDS[text * 2]} ")
            index += 2
            continue
        if text == "!":
            out.append(" not ")
        else:
            out.append(text if token.type != tokenize.NEWLINE else "")
        index += 1
    return " ".join(part for part in out if part)


def parse(condition: str) -> ast.Expression:
    """The condition as a checked Python expression tree; ConditionError outside the subset."""
    try:
        tree = ast.parse(_translate(condition), mode="eval")
    except SyntaxError as exc:
        raise ConditionError(f"{condition!r}: not an expression of the supported subset ({exc.msg})") from exc
    for node in ast.walk(tree):
        allowed = (
            ast.Expression,
            ast.BoolOp,
            ast.And,
            ast.Or,
            ast.UnaryOp,
            ast.Not,
            ast.USub,
            ast.Compare,
            ast.BinOp,
            ast.Subscript,
            ast.Name,
            ast.Load,
            ast.Call,
            ast.Constant,
            *_COMPARE,
            *_ARITHMETIC,
        )
        if not isinstance(node, allowed):
            raise ConditionError(f"{condition!r}: {type(node).__name__} is not supported")
        if isinstance(node, ast.Constant) and (isinstance(node.value, bool) or not isinstance(node.value, int | float)):
            raise ConditionError(f"{condition!r}: only numeric literals are supported, not {node.value!r}")
        if isinstance(node, ast.Name) and node.id != "result" and node.id not in _FUNCTIONS:
            raise ConditionError(f"{condition!r}: unknown name {node.id!r}")
        if isinstance(node, ast.Call) and (
            not isinstance(node.func, ast.Name)
            or node.func.id not in _FUNCTIONS
            or len(node.args) != 1
            or node.keywords
        ):
            raise ConditionError(f"{condition!r}: calls are len(x), isNaN(x), isInf(x) only")
    return tree


def _eval(node: ast.AST, result: Result) -> Any:
    match node:
        case ast.BoolOp(op=ast.And(), values=values):
            return all(_eval(value, result) for value in values)  # all() stops at the first false
        case ast.BoolOp(op=ast.Or(), values=values):
            return any(_eval(value, result) for value in values)
        case ast.UnaryOp(op=ast.Not(), operand=operand):
            return not _eval(operand, result)
        case ast.UnaryOp(op=ast.USub(), operand=operand):
            return -_eval(operand, result)
        case ast.Compare(left=left, ops=ops, comparators=comparators):
            value = _eval(left, result)
            for op, comparator in zip(ops, comparators, strict=True):
                other = _eval(comparator, result)
                if not _COMPARE[type(op)](value, other):
                    return False
                value = other
            return True
        case ast.BinOp(left=left, op=op, right=right):
            return _ARITHMETIC[type(op)](_eval(left, result), _eval(right, result))
        case ast.Subscript(value=value, slice=index):
            container, position = _eval(value, result), _eval(index, result)
            if not isinstance(container, Sequence) or not isinstance(position, int):
                raise ConditionError(f"cannot index {container!r} with {position!r}")
            if not 0 <= position < len(container):
                raise ConditionError(f"index out of range: {position} (array length {len(container)})")
            return container[position]
        case ast.Call(func=ast.Name(id=name), args=[argument]):
            return _FUNCTIONS[name](_eval(argument, result))
        case ast.Name(id="result"):
            return result
        case ast.Constant(value=value):
            return value
    raise ConditionError(f"unsupported node {ast.dump(node)}")  # parse() admits nothing else


def evaluate(condition: str, result: Result) -> bool:
    """The condition's value for this result; ConditionError where expr-lang would fail too."""
    try:
        value = _eval(parse(condition).body, result)
    except (TypeError, ZeroDivisionError) as exc:
        raise ConditionError(f"{condition!r}: {exc}") from exc
    if not isinstance(value, bool):
        raise ConditionError(f"{condition!r}: expected bool, but got {type(value).__name__}")
    return value
