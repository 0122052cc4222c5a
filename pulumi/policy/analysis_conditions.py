"""Argo Rollouts' successCondition and failureCondition, evaluated as the controller does.

Argo Rollouts (utils/evaluate/evaluate.go) compiles each condition with expr-lang
(github.com/expr-lang/expr) in an environment where `result` is the provider's value (a Prometheus
vector or matrix arrives as a list of floats, a scalar as a float) and `isNaN`, `isInf` are
functions. A condition that does not compile or fails at run time (an index past the end of an
empty result) makes the measurement Error; otherwise success without failure is Successful, a
failure Failed, neither Inconclusive. With one condition only, the other is its negation; with
none, every measurement is Successful.

This module parses and evaluates a subset of expr-lang with its grammar and types: number and
bool literals, `result`, `x[i]` (a negative index counts from the end, as in expr-lang), `len`,
`isNaN`, `isInf`, `all(list, predicate)` and `any(list, predicate)` over `#`, unary `!`/`not`
and `-`/`+`, `*` `/`, `+` `-`, the comparisons (chained ones joined by `&&`), `&&`/`and`,
`||`/`or`, and parentheses, at expr-lang's precedences. Types are checked before anything runs,
as expr-lang's compiler does, so a mistyped branch fails even where `&&` would skip it. Anything
else (strings, `in`, `??`, `?:`, member access, other functions) is an UnsupportedCondition: the
pack cannot say what the controller would do with it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

SUCCESSFUL, FAILED, INCONCLUSIVE, ERROR = "Successful", "Failed", "Inconclusive", "Error"
Result = float | Sequence[float]
Value = bool | int | float | Sequence[float]


class ConditionError(ValueError):
    """A condition that expr-lang refuses to compile or that fails at run time: Argo's Error."""


class UnsupportedCondition(ValueError):
    """Syntax outside the subset this module evaluates."""


_TOKEN = re.compile(
    r"\s*(?:(?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)|(?P<name>[A-Za-z_]\w*)"
    r"|(?P<op>&&|\|\||==|!=|<=|>=|[<>!+\-*/()\[\],{}#])|(?P<other>\S))"
)
_WORDS = {"and": "&&", "or": "||", "not": "!"}
_BINARY = {"||": 10, "&&": 15, "==": 20, "!=": 20, "<": 20, ">": 20, "<=": 20, ">=": 20, "+": 30, "-": 30}
_BINARY |= {"*": 60, "/": 60}
_UNARY = {"!": 50, "-": 90, "+": 90}
_COMPARISONS = ("<", ">", "<=", ">=")
_FUNCTIONS = ("len", "isNaN", "isInf")
_PREDICATES = ("all", "any")


@dataclass(frozen=True)
class Node:
    kind: str  # number, bool, name, unary, binary, index, call
    value: object = None  # the literal, the name, the operator or the function
    children: tuple[Node, ...] = ()


def _tokens(condition: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    position = 0
    while condition[position:].strip():
        match = _TOKEN.match(condition, position)
        assert match is not None  # `other` matches any character that is not blank
        kind = match.lastgroup or ""
        text = match.group(kind)
        if kind == "other":
            raise UnsupportedCondition(f"{condition!r}: {text!r} at offset {match.start(kind)} is outside the subset")
        if kind == "name" and text in _WORDS:
            kind, text = "op", _WORDS[text]
        found.append((kind, text))
        position = match.end()
    return found


class _Parser:
    """expr-lang's precedence climbing (parser/parser.go) over the subset's tokens."""

    def __init__(self, condition: str) -> None:
        self.condition = condition
        self.tokens = _tokens(condition)
        self.position = 0
        self.predicate_depth = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.position] if self.position < len(self.tokens) else ("end", "")

    def take(self, text: str | None = None) -> str:
        kind, found = self.peek()
        if kind == "end" or (text is not None and found != text):
            wanted = repr(text) if text else "more"
            raise ConditionError(f"{self.condition!r}: expected {wanted}, found {found or 'the end'!r}")
        self.position += 1
        return found

    def parse(self) -> Node:
        node = self.expression(0)
        if self.peek()[0] != "end":
            raise UnsupportedCondition(f"{self.condition!r}: {self.peek()[1]!r} is outside the subset")
        return node

    def expression(self, precedence: int) -> Node:
        left = self.primary()
        while True:
            kind, op = self.peek()
            if kind != "op" or op not in _BINARY or _BINARY[op] < precedence:
                return left
            self.take()
            if op in _COMPARISONS:  # a < b < c is a < b && b < c
                left = self.comparison(left, op)
            else:
                left = Node("binary", op, (left, self.expression(_BINARY[op] + 1)))

    def comparison(self, left: Node, op: str) -> Node:
        root: Node | None = None
        while True:
            right = self.expression(_BINARY[op] + 1)
            node = Node("binary", op, (left, right))
            root = node if root is None else Node("binary", "&&", (root, node))
            kind, following = self.peek()
            if kind != "op" or following not in _COMPARISONS:
                return root
            left, op = right, self.take()

    def primary(self) -> Node:
        kind, text = self.peek()
        if kind == "op" and text in _UNARY:
            self.take()
            return self.postfix(Node("unary", text, (self.expression(_UNARY[text]),)))
        if kind == "op" and text == "(":
            self.take()
            node = self.expression(0)
            self.take(")")
            return self.postfix(node)
        if kind == "number":
            self.take()
            number = float(text) if any(c in text for c in ".eE") else int(text)
            return self.postfix(Node("number", number))
        if kind == "op" and text == "#" and self.predicate_depth:
            self.take()
            return self.postfix(Node("name", "#"))
        if kind == "name":
            self.take()
            if text in ("true", "false"):
                return self.postfix(Node("bool", text == "true"))
            if self.peek()[1] == "(":
                return self.postfix(self.call(text))
            if text != "result":
                raise UnsupportedCondition(f"{self.condition!r}: unknown name {text!r} (the subset has `result`)")
            return self.postfix(Node("name", text))
        raise UnsupportedCondition(f"{self.condition!r}: {text or 'the end'!r} is outside the subset")

    def call(self, name: str) -> Node:
        if name not in (*_FUNCTIONS, *_PREDICATES):
            raise UnsupportedCondition(f"{self.condition!r}: function {name!r} is outside the subset")
        self.take("(")
        arguments = [self.expression(0)]
        if name in _PREDICATES:
            self.take(",")
            self.predicate_depth += 1
            braced = self.peek()[1] == "{"
            if braced:
                self.take("{")
            arguments.append(self.expression(0))
            if braced:
                self.take("}")
            self.predicate_depth -= 1
        self.take(")")
        return Node("call", name, tuple(arguments))

    def postfix(self, node: Node) -> Node:
        while self.peek()[1] == "[":
            self.take("[")
            index = self.expression(0)
            self.take("]")
            node = Node("index", None, (node, index))
        return node


def parse(condition: str) -> Node:
    """The condition's syntax tree; UnsupportedCondition outside the subset."""
    return _Parser(condition).parse()


_NUMBERS = ("int", "float")


def _type(node: Node, env: dict[str, str], condition: str) -> str:
    """The node's type (int, float, bool, list), as expr-lang's checker infers it from `result`."""
    children = [_type(child, env, condition) for child in node.children if node.kind != "call"]

    def refuse(what: str) -> ConditionError:
        return ConditionError(f"{condition!r}: {what} (mismatched types {' and '.join(children)})")

    match node.kind, node.value:
        case "number", value:
            return "int" if isinstance(value, int) else "float"
        case "bool", _:
            return "bool"
        case "name", name:
            return env[str(name)]
        case "unary", "!":
            if children != ["bool"]:
                raise refuse("invalid operation: !")
            return "bool"
        case "unary", _:
            if children[0] not in _NUMBERS:
                raise refuse(f"invalid operation: {node.value}")
            return children[0]
        case "binary", "&&" | "||":
            if children != ["bool", "bool"]:
                raise refuse(f"invalid operation: {node.value}")
            return "bool"
        case "binary", "==" | "!=":
            if not (set(children) <= set(_NUMBERS) or children[0] == children[1]):
                raise refuse(f"invalid operation: {node.value}")
            return "bool"
        case "binary", op:
            if not set(children) <= set(_NUMBERS):
                raise refuse(f"invalid operation: {op}")
            if op in _COMPARISONS:
                return "bool"
            return "int" if op != "/" and children == ["int", "int"] else "float"
        case "index", _:
            if children[0] != "list":
                raise ConditionError(f"{condition!r}: type {children[0]} does not support indexing")
            if children[1] != "int":
                raise ConditionError(f"{condition!r}: array elements can only be selected using an integer")
            return "float"
    return _call_type(node, env, condition)


def _call_type(node: Node, env: dict[str, str], condition: str) -> str:
    name = str(node.value)
    argument = _type(node.children[0], env, condition)
    if name in _PREDICATES:
        predicate = _type(node.children[1], {**env, "#": "float"}, condition)
        if argument != "list" or predicate != "bool":
            raise ConditionError(f"{condition!r}: {name} takes a list and a bool predicate")
        return "bool"
    if len(node.children) != 1:
        raise ConditionError(f"{condition!r}: {name} takes one argument")
    if name == "len":
        if argument != "list":
            raise ConditionError(f"{condition!r}: invalid argument for len (type {argument})")
        return "int"
    if argument not in _NUMBERS:
        raise ConditionError(f"{condition!r}: cannot use {argument} as argument (type float64) to call {name}")
    return "bool"


def _compare(op: str, left: float, right: float) -> bool:
    """Go's comparisons: every one with NaN is false, but !=."""
    return {
        "==": left == right,
        "!=": left != right,
        "<": left < right,
        ">": left > right,
        "<=": left <= right,
        ">=": left >= right,
    }[op]


def _divide(left: float, right: float) -> float:
    """Go's float64 division: by zero it is ±Inf, or NaN for 0/0."""
    if right == 0:
        return math.nan if left == 0 or math.isnan(left) else math.copysign(math.inf, left) * math.copysign(1, right)
    return left / right


def _run(node: Node, env: dict[str, Value], condition: str) -> Value:
    match node.kind, node.value:
        case "number" | "bool", value:
            return value
        case "name", name:
            return env[str(name)]
        case "unary", op:
            operand = _run(node.children[0], env, condition)
            return not operand if op == "!" else -operand if op == "-" else operand
        case "binary", "&&":
            return bool(_run(node.children[0], env, condition)) and bool(_run(node.children[1], env, condition))
        case "binary", "||":
            return bool(_run(node.children[0], env, condition)) or bool(_run(node.children[1], env, condition))
        case "binary", op:
            left, right = (_run(child, env, condition) for child in node.children)
            if op in ("==", "!=", *_COMPARISONS):
                return _compare(str(op), left, right)
            if op == "/":
                return _divide(float(left), float(right))
            return {"+": left + right, "-": left - right, "*": left * right}[str(op)]
        case "index", _:
            items, index = (_run(child, env, condition) for child in node.children)
            assert isinstance(items, Sequence) and isinstance(index, int)  # _type() admits nothing else
            position = index + len(items) if index < 0 else index
            if not 0 <= position < len(items):
                raise ConditionError(f"{condition!r}: index out of range: {position} (array length is {len(items)})")
            return items[position]
        case "call", "all" | "any":
            items = _run(node.children[0], env, condition)
            assert isinstance(items, Sequence)
            found = (bool(_run(node.children[1], {**env, "#": item}, condition)) for item in items)
            return all(found) if node.value == "all" else any(found)
    argument = _run(node.children[0], env, condition)
    if node.value == "len":
        return len(argument)
    return math.isnan(argument) if node.value == "isNaN" else math.isinf(argument)


def evaluate(condition: str, result: Result) -> bool:
    """The condition's value for this result. ConditionError where expr-lang fails to compile or
    run it (Argo's Error), UnsupportedCondition outside the subset."""
    tree = parse(condition)
    value_type = _type(tree, {"result": "list" if isinstance(result, Sequence) else "float"}, condition)
    if value_type != "bool":
        raise ConditionError(f"{condition!r}: expected bool, but got {value_type}")
    return bool(_run(tree, {"result": result}, condition))


@dataclass(frozen=True)
class Measurement:
    phase: str
    error: str = ""


def measure(success: str | None, failure: str | None, result: Result) -> Measurement:
    """The measurement's phase as Argo Rollouts' EvaluateResult decides it (an empty condition is
    none). UnsupportedCondition propagates: the pack cannot say."""
    try:
        succeeded = evaluate(success, result) if success else False
        failed = evaluate(failure, result) if failure else False
    except ConditionError as exc:
        return Measurement(ERROR, str(exc))
    if not success and not failure:
        return Measurement(SUCCESSFUL)
    if success and not failure:
        failed = not succeeded
    elif failure and not success:
        succeeded = not failed
    if failed:
        return Measurement(FAILED)
    return Measurement(SUCCESSFUL if succeeded else INCONCLUSIVE)
