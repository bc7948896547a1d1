"""Operators: arithmetic, ``&`` and the comparisons (also used by ``SWITCH``).

Blank takes part in arithmetic as 0 and in ``&`` as empty text. ``=`` treats blank,
empty text, 0, FALSE and an empty list as equal to one another (as Airtable does, so
``{Amount} = BLANK()`` is true for 0). Text compares case-sensitively. Two ISO-8601 date
strings, or a date and anything that parses as one, compare as instants. A comparison
that has no sensible answer (text ordered against a number) is false, as in JavaScript.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import Any

from .errors import DIV0, NUM, VALUE
from .values import (
    MAX_TEXT,
    check_number,
    fail,
    is_blank,
    looks_like_date,
    parse_iso,
    to_number,
    to_text,
)

Number = int | float
_MAX_EXACT = 2**53


def num(x: Number) -> Number:
    """Keep integers exact while doubles can hold them; otherwise go to float (or #NUM!)."""
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) > _MAX_EXACT:
        try:
            return float(x)
        except OverflowError:
            raise fail(NUM, "number out of range") from None
    return check_number(x)


def add(a: Any, b: Any) -> Number:
    return num(to_number(a) + to_number(b))


def sub(a: Any, b: Any) -> Number:
    return num(to_number(a) - to_number(b))


def mul(a: Any, b: Any) -> Number:
    return num(to_number(a) * to_number(b))


def div(a: Any, b: Any) -> Number:
    x, y = to_number(a), to_number(b)
    if y == 0:
        raise fail(DIV0, "division by zero")
    return num(x / y)


def mod(a: Any, b: Any) -> Number:
    """Remainder with the sign of the dividend, as JavaScript's ``%`` (Airtable's MOD)."""
    x, y = to_number(a), to_number(b)
    if y == 0:
        raise fail(DIV0, "division by zero")
    if isinstance(x, int) and isinstance(y, int):
        r = abs(x) % abs(y)
        return -r if x < 0 else r
    return num(math.fmod(x, y))


def power(a: Any, b: Any) -> Number:
    x, y = to_number(a), to_number(b)
    if x == 0 and y < 0:
        raise fail(DIV0, "zero to a negative power")
    try:
        # Exact integer powers while the result fits a double; bounded before computing.
        exact = isinstance(x, int) and isinstance(y, int) and y >= 0
        if exact and (x in (0, 1, -1) or y * math.log2(abs(x)) <= 53):
            return x**y
        return num(math.pow(x, y))
    except (OverflowError, ValueError):
        raise fail(NUM, f"cannot raise {x} to {y}") from None


def concat(a: Any, b: Any) -> str:
    left, right = to_text(a), to_text(b)
    if len(left) + len(right) > MAX_TEXT:
        raise fail(VALUE, f"text result longer than {MAX_TEXT} characters")
    return left + right


def _as_dates(a: Any, b: Any) -> tuple[datetime, datetime] | None:
    """Both operands as instants when the comparison is about dates, else ``None``."""
    about_dates = isinstance(a, datetime) or isinstance(b, datetime)
    if not (about_dates or (looks_like_date(a) and looks_like_date(b))):
        return None
    da = a if isinstance(a, datetime) else parse_iso(a) if isinstance(a, str) else None
    db = b if isinstance(b, datetime) else parse_iso(b) if isinstance(b, str) else None
    if da is None or db is None:
        return None
    return da, db


def _numeric(v: Any) -> bool:
    return isinstance(v, (int, float))


def equals(a: Any, b: Any) -> bool:
    """The ``=`` operator."""
    if is_blank(a) or is_blank(b):
        return (is_blank(a) or a == 0 or a is False) and (is_blank(b) or b == 0 or b is False)
    if isinstance(a, datetime) or isinstance(b, datetime) or (looks_like_date(a) and looks_like_date(b)):
        dates = _as_dates(a, b)
        return dates is not None and dates[0] == dates[1]
    if _numeric(a) and _numeric(b):
        return to_number(a) == to_number(b)
    if _numeric(a) or _numeric(b):
        try:
            return to_number(a) == to_number(b)
        except Exception:  # noqa: BLE001 - text that is not a number is simply unequal
            return False
    return to_text(a) == to_text(b)


def _order(a: Any, b: Any) -> int | None:
    """-1/0/1 for a vs b, or ``None`` when the pair has no order."""
    if is_blank(a) and is_blank(b):
        return 0
    if is_blank(a) or is_blank(b):
        other = b if is_blank(a) else a
        if isinstance(other, datetime) or looks_like_date(other):
            return None
        zero: Any = 0 if _numeric(other) else ""
        a, b = (zero, b) if is_blank(a) else (a, zero)
    x: Any
    y: Any
    if isinstance(a, datetime) or isinstance(b, datetime) or (looks_like_date(a) and looks_like_date(b)):
        dates = _as_dates(a, b)
        if dates is None:
            return None
        x, y = dates
    elif _numeric(a) or _numeric(b):
        try:
            x, y = to_number(a), to_number(b)
        except Exception:  # noqa: BLE001 - JavaScript: text vs number is NaN, every test false
            return None
    else:
        x, y = to_text(a), to_text(b)
    return (x > y) - (x < y)


def _ordered(test: Callable[[int], bool]) -> Callable[[Any, Any], bool]:
    def compare(a: Any, b: Any) -> bool:
        order = _order(a, b)
        return order is not None and test(order)

    return compare


BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": add, "-": sub, "*": mul, "/": div, "%": mod, "^": power, "&": concat,
    "=": equals,
    "!=": lambda a, b: not equals(a, b),
    "<>": lambda a, b: not equals(a, b),
    "<": _ordered(lambda o: o < 0),
    ">": _ordered(lambda o: o > 0),
    "<=": _ordered(lambda o: o <= 0),
    ">=": _ordered(lambda o: o >= 0),
}
