"""Logical functions. IF, SWITCH, ISERROR and IFERROR receive their arguments
unevaluated, so ``IF({n} = 0, 0, 1 / {n})`` never divides by zero."""

from __future__ import annotations

from typing import Any

from .errors import ERROR, FormulaError
from .operators import equals
from .spec import EvalContext, Registry, Thunk
from .values import fail, is_blank, to_text, truthy

logical = Registry("logical")


@logical(
    "IF(condition, value_if_true, [value_if_false])",
    "value_if_true when condition is truthy, else value_if_false (blank).",
    lazy=True,
)
def _if(ctx: EvalContext, args: list[Thunk]) -> Any:
    if truthy(args[0](ctx)):
        return args[1](ctx)
    return args[2](ctx) if len(args) > 2 else None


@logical(
    "SWITCH(expression, [pattern, result], ..., [default])",
    "The result paired with the first pattern equal to expression, else default.",
    lazy=True,
)
def _switch(ctx: EvalContext, args: list[Thunk]) -> Any:
    value = args[0](ctx)
    rest = args[1:]
    default = rest.pop() if len(rest) % 2 == 1 else None
    for i in range(0, len(rest), 2):
        if equals(value, rest[i](ctx)):
            return rest[i + 1](ctx)
    return default(ctx) if default is not None else None


@logical("AND(value, ...)", "TRUE when every argument is truthy.")
def _and(ctx: EvalContext, args: list[Any]) -> bool:
    return all(truthy(a) for a in args)


@logical("OR(value, ...)", "TRUE when at least one argument is truthy.")
def _or(ctx: EvalContext, args: list[Any]) -> bool:
    return any(truthy(a) for a in args)


@logical("XOR(value, ...)", "TRUE when an odd number of arguments are truthy.")
def _xor(ctx: EvalContext, args: list[Any]) -> bool:
    return sum(1 for a in args if truthy(a)) % 2 == 1


@logical("NOT(value)", "Logical negation.")
def _not(ctx: EvalContext, args: list[Any]) -> bool:
    return not truthy(args[0])


@logical("BLANK()", "The empty value.")
def _blank(ctx: EvalContext, args: list[Any]) -> None:
    return None


@logical("ERROR([message])", "Produces the #ERROR! value.")
def _error(ctx: EvalContext, args: list[Any]) -> Any:
    raise fail(ERROR, to_text(args[0]) if args else "ERROR()")


@logical("ISERROR(expression)", "TRUE when evaluating expression produces an error value.", lazy=True)
def _iserror(ctx: EvalContext, args: list[Thunk]) -> bool:
    try:
        args[0](ctx)
    except FormulaError:
        return True
    return False


@logical(
    "IFERROR(expression, value_if_error)",
    "expression, or value_if_error when it produces an error value.",
    lazy=True,
)
def _iferror(ctx: EvalContext, args: list[Thunk]) -> Any:
    try:
        return args[0](ctx)
    except FormulaError:
        return args[1](ctx)


@logical("ISBLANK(value)", "TRUE for blank, empty text or an empty list.")
def _isblank(ctx: EvalContext, args: list[Any]) -> bool:
    return is_blank(args[0])


@logical("TRUE()", "The logical value TRUE.")
def _true(ctx: EvalContext, args: list[Any]) -> bool:
    return True


@logical("FALSE()", "The logical value FALSE.")
def _false(ctx: EvalContext, args: list[Any]) -> bool:
    return False
