"""Numeric functions. Rounding works on the decimal digits shown (ROUND(2.675, 2) is
2.68, as in a spreadsheet), not on the binary double underneath."""

from __future__ import annotations

import math
from datetime import datetime
from decimal import ROUND_CEILING, ROUND_DOWN, ROUND_FLOOR, ROUND_HALF_UP, ROUND_UP, Decimal, InvalidOperation
from typing import Any

from .errors import DIV0, NUM, VALUE
from .operators import div, mod, num, power
from .spec import EvalContext, Registry
from .values import fail, flatten, looks_like_date, parse_iso, to_int, to_number, to_text

numeric = Registry("numeric")
Number = int | float


def _dec(x: Number) -> Decimal:
    return Decimal(x) if isinstance(x, int) else Decimal(repr(float(x)))


def _from_dec(d: Decimal) -> Number:
    if d == d.to_integral_value() and abs(d) <= 2**53:
        return int(d)
    return num(float(d))


def _round(args: list[Any], mode: str) -> Number:
    x = to_number(args[0])
    places = to_int(args[1]) if len(args) > 1 and args[1] is not None else 0
    if places > 15 or isinstance(x, int) and places >= 0:
        return x
    places = max(places, -308)
    try:
        return _from_dec(_dec(x).quantize(Decimal(1).scaleb(-places), rounding=mode))
    except InvalidOperation:
        return x


@numeric("ROUND(number, [precision])", "Rounds half away from zero to precision decimal places.")
def _round_half(ctx: EvalContext, args: list[Any]) -> Number:
    return _round(args, ROUND_HALF_UP)


@numeric("ROUNDUP(number, [precision])", "Rounds away from zero.")
def _roundup(ctx: EvalContext, args: list[Any]) -> Number:
    return _round(args, ROUND_UP)


@numeric("ROUNDDOWN(number, [precision])", "Rounds toward zero.")
def _rounddown(ctx: EvalContext, args: list[Any]) -> Number:
    return _round(args, ROUND_DOWN)


def _multiple(args: list[Any], mode: str) -> Number:
    x = to_number(args[0])
    sig = to_number(args[1]) if len(args) > 1 and args[1] is not None else 1
    if sig == 0:
        return 0
    try:
        step = _dec(sig)
        return _from_dec((_dec(x) / step).to_integral_value(rounding=mode) * step)
    except InvalidOperation:
        raise fail(NUM, "number out of range") from None


@numeric("CEILING(number, [significance])", "Smallest multiple of significance (default 1) not below number.")
def _ceiling(ctx: EvalContext, args: list[Any]) -> Number:
    return _multiple(args, ROUND_CEILING)


@numeric("FLOOR(number, [significance])", "Largest multiple of significance (default 1) not above number.")
def _floor(ctx: EvalContext, args: list[Any]) -> Number:
    return _multiple(args, ROUND_FLOOR)


@numeric("INT(number)", "Largest integer not greater than number.")
def _int(ctx: EvalContext, args: list[Any]) -> Number:
    x = to_number(args[0])
    return x if isinstance(x, int) else num(math.floor(x))


@numeric("ABS(number)", "Absolute value.")
def _abs(ctx: EvalContext, args: list[Any]) -> Number:
    return abs(to_number(args[0]))


@numeric("SIGN(number)", "-1, 0 or 1 by the sign of number.")
def _sign(ctx: EvalContext, args: list[Any]) -> int:
    x = to_number(args[0])
    return (x > 0) - (x < 0)


@numeric("MOD(number, divisor)", "Remainder of number / divisor, with the sign of number.")
def _mod(ctx: EvalContext, args: list[Any]) -> Number:
    return mod(args[0], args[1])


@numeric("POWER(base, exponent)", "base raised to exponent.")
def _power(ctx: EvalContext, args: list[Any]) -> Number:
    return power(args[0], args[1])


@numeric("SQRT(number)", "Square root (#NUM! for negative numbers).")
def _sqrt(ctx: EvalContext, args: list[Any]) -> Number:
    x = to_number(args[0])
    if x < 0:
        raise fail(NUM, "square root of a negative number")
    return num(math.sqrt(x))


@numeric("EXP(number)", "e raised to number.")
def _exp(ctx: EvalContext, args: list[Any]) -> Number:
    try:
        return num(math.exp(to_number(args[0])))
    except OverflowError:
        raise fail(NUM, "result too large") from None


def _log(x: Number, base: Number) -> Number:
    if x <= 0 or base <= 0:
        raise fail(NUM, "logarithm of a non-positive number")
    if base == 1:
        raise fail(DIV0, "logarithm base 1")
    return num(math.log(x) / math.log(base)) if base != 10 else num(math.log10(x))


@numeric("LN(number)", "Natural logarithm.")
def _ln(ctx: EvalContext, args: list[Any]) -> Number:
    x = to_number(args[0])
    if x <= 0:
        raise fail(NUM, "logarithm of a non-positive number")
    return num(math.log(x))


@numeric("LOG(number, [base])", "Logarithm in base (default 10).")
def _logn(ctx: EvalContext, args: list[Any]) -> Number:
    base = to_number(args[1]) if len(args) > 1 and args[1] is not None else 10
    return _log(to_number(args[0]), base)


@numeric("LOG10(number)", "Base-10 logarithm.")
def _log10(ctx: EvalContext, args: list[Any]) -> Number:
    return _log(to_number(args[0]), 10)


def _numbers(args: list[Any]) -> list[Number]:
    """Numbers among the (flattened) arguments; blanks are skipped, other text is #VALUE!."""
    return [to_number(v) for v in flatten(args) if v is not None and v != ""]


@numeric("SUM(number, ...)", "Sum of the numbers (lists are expanded, blanks skipped).")
def _sum(ctx: EvalContext, args: list[Any]) -> Number:
    values = _numbers(args)
    # fsum keeps 0.1 + 0.2 + ... honest; ints stay exact.
    return num(math.fsum(values)) if any(isinstance(v, float) for v in values) else num(sum(values))


@numeric("AVERAGE(number, ...)", "Arithmetic mean of the numbers (blanks skipped).")
def _average(ctx: EvalContext, args: list[Any]) -> Number:
    values = _numbers(args)
    if not values:
        raise fail(DIV0, "average of no numbers")
    return div(math.fsum(values), len(values))


def _extreme(args: list[Any], pick: Any) -> Any:
    values = [v for v in flatten(args) if v is not None and v != ""]
    if values and all(isinstance(v, datetime) or looks_like_date(v) for v in values):
        # Rollup-style MIN/MAX over dates returns a date.
        return pick(v if isinstance(v, datetime) else parse_iso(v) for v in values)
    numbers = [to_number(v) for v in values]
    return pick(numbers) if numbers else 0


@numeric("MIN(number, ...)", "Smallest number (or earliest date); 0 when there is none.")
def _min(ctx: EvalContext, args: list[Any]) -> Any:
    return _extreme(args, min)


@numeric("MAX(number, ...)", "Largest number (or latest date); 0 when there is none.")
def _max(ctx: EvalContext, args: list[Any]) -> Any:
    return _extreme(args, max)


@numeric("COUNT(value, ...)", "How many arguments (list items) are numbers.")
def _count(ctx: EvalContext, args: list[Any]) -> int:
    return sum(1 for v in flatten(args) if isinstance(v, (int, float)) and not isinstance(v, bool))


@numeric("COUNTA(value, ...)", "How many arguments (list items) are not empty.")
def _counta(ctx: EvalContext, args: list[Any]) -> int:
    return sum(1 for v in flatten(args) if v is not None and v != "")


@numeric("COUNTALL(value, ...)", "How many arguments (list items) there are, empty ones included.")
def _countall(ctx: EvalContext, args: list[Any]) -> int:
    return len(flatten(args))


def _to_parity(x: Number, odd: bool) -> Number:
    sign = -1 if x < 0 else 1
    n = math.ceil(abs(x))
    if n % 2 != (1 if odd else 0):
        n += 1
    return sign * n


@numeric("EVEN(number)", "Rounds away from zero to the nearest even integer.")
def _even(ctx: EvalContext, args: list[Any]) -> Number:
    return _to_parity(to_number(args[0]), odd=False)


@numeric("ODD(number)", "Rounds away from zero to the nearest odd integer.")
def _odd(ctx: EvalContext, args: list[Any]) -> Number:
    return _to_parity(to_number(args[0]), odd=True)


@numeric("VALUE(text)", "Reads a number out of text, ignoring currency signs, commas and spaces.")
def _value(ctx: EvalContext, args: list[Any]) -> Number:
    v = args[0]
    if not isinstance(v, str):
        return to_number(v)
    s = "".join(ch for ch in v if ch not in " \u00a0,$€£¥_")
    percent = s.endswith("%")
    s = s.removesuffix("%")
    if s.startswith("(") and s.endswith(")"):
        s = "-" + s[1:-1]
    try:
        x = to_number(s) if s else None
    except Exception:  # noqa: BLE001 - reported below with the original text
        x = None
    if x is None:
        raise fail(VALUE, f"no number in {to_text(v)[:40]!r}")
    return num(x / 100) if percent else x
