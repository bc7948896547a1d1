"""Turns a syntax tree into nested Python closures, built once per formula.

Evaluation is on the hot path of every write, so the tree is not re-interpreted per
record: each node becomes a closure ``f(ctx) -> value`` and a record costs one call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import VALUE
from .functions import FUNCTIONS
from .nodes import Bool, Call, Chain, Field, Node, Num, Str, Unary
from .operators import BINARY, num
from .spec import EvalContext, Thunk
from .values import MAX_TEXT, fail, to_number


def _const(value: Any) -> Thunk:
    return lambda ctx: value


def _field(name: str) -> Thunk:
    def get(ctx: EvalContext) -> Any:
        value = ctx.fields.get(name)
        # Tuples (from some drivers) behave as lists; empty text stays "" (it is blank-like).
        return list(value) if isinstance(value, tuple) else value

    return get


def _checked(impl: Callable[[EvalContext, list[Any]], Any]) -> Callable[[EvalContext, list[Any]], Any]:
    def call(ctx: EvalContext, args: list[Any]) -> Any:
        result = impl(ctx, args)
        if isinstance(result, str) and len(result) > MAX_TEXT:
            raise fail(VALUE, f"text result longer than {MAX_TEXT} characters")
        return result

    return call


def _call(node: Call) -> Thunk:
    spec = FUNCTIONS[node.name]
    impl = _checked(spec.impl)
    argfns = [build(a) for a in node.args]
    if spec.lazy:
        return lambda ctx: impl(ctx, argfns)  # type: ignore[arg-type]
    return lambda ctx: impl(ctx, [f(ctx) for f in argfns])


def _unary(node: Unary) -> Thunk:
    inner = build(node.operand)
    if node.op == "-":
        return lambda ctx: num(-to_number(inner(ctx)))
    return lambda ctx: to_number(inner(ctx))


def _chain(node: Chain) -> Thunk:
    first = build(node.first)
    steps = [(BINARY[op], build(child)) for op, child in node.rest]
    if len(steps) == 1:
        (op, right), = steps
        return lambda ctx: op(first(ctx), right(ctx))

    def run(ctx: EvalContext) -> Any:
        value = first(ctx)
        for op, right in steps:
            value = op(value, right(ctx))
        return value

    return run


def build(node: Node) -> Thunk:
    """Compile a tree to a closure evaluating it against an :class:`EvalContext`."""
    if isinstance(node, (Num, Str, Bool)):
        return _const(node.value)
    if isinstance(node, Field):
        return _field(node.name)
    if isinstance(node, Call):
        return _call(node)
    if isinstance(node, Unary):
        return _unary(node)
    if isinstance(node, Chain):
        return _chain(node)
    raise TypeError(f"not a formula node: {node!r}")


__all__ = ["build"]
