"""Evaluate planned filters in Python over one typed row (realtime subscriptions).

The SQL emitted by :mod:`storage.query.build` is the reference: this evaluator follows it
so that a realtime subscription with ``filter`` sees the same records a list with the
same filters would. Rows are keyed by physical name (``id``, ``created_at``, ``c_<id>``)
and hold Python values as psycopg would return them (datetime, float, list, JSON values).

Like SQL, a condition on a missing value is *unknown*; a negated filter matches where its
condition is false or unknown (``IS NOT TRUE``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from storage import jsontext
from storage.query.parse import Op
from storage.query.plan import JsonOperand, Kind, PlannedFilter

_NUMERIC_TEXT = re.compile(r"^\s*[-+]?([0-9]{1,100}(\.[0-9]{0,100})?|\.[0-9]{1,100})([eE][-+]?[0-9]{1,3})?\s*$")


def matches(filters: Sequence[PlannedFilter], row: Mapping[str, Any]) -> bool:
    """Whether ``row`` satisfies every filter (AND), with SQL's NULL semantics.

    >>> from storage.query.targets import Target
    >>> f = PlannedFilter(Target("n", "c_1", Kind.NUMBER), Op.GT, 2.0)
    >>> matches([f], {"c_1": 3.0}), matches([f], {"c_1": None})
    (True, False)
    >>> matches([PlannedFilter(f.target, Op.GT, 2.0, negate=True)], {"c_1": None})
    True
    """
    for f in filters:
        result = _condition(f, row.get(f.target.physical))
        if f.negate:
            if result is True:
                return False
        elif result is not True:
            return False
    return True


def _like(pattern: str, text: str, insensitive: bool) -> bool:
    """SQL LIKE with backslash escapes (the planner escapes ``_`` and ``\\``)."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    flags = re.DOTALL | (re.IGNORECASE if insensitive else 0)
    return re.fullmatch("".join(out), text, flags) is not None


def _compare(op: Op, left: Any, right: Any) -> bool | None:
    if left is None or right is None:
        return None
    try:
        if op is Op.EQ:
            return bool(left == right)
        if op is Op.GT:
            return bool(left > right)
        if op is Op.GTE:
            return bool(left >= right)
        if op is Op.LT:
            return bool(left < right)
        if op is Op.LTE:
            return bool(left <= right)
    except TypeError:
        return None
    return None


def _condition(f: PlannedFilter, value: Any) -> bool | None:
    kind, op = f.target.kind, f.op
    if op is Op.IS:
        return _is(kind, f.value, value)
    if kind is Kind.JSON:
        return _json_condition(op, f.value, value)
    if kind is Kind.MULTI:
        if value is None:
            return None
        cell = set(value)
        wanted = set(f.value)
        return bool(cell & wanted) if op is Op.IN else wanted <= cell
    if kind is Kind.BOOL:
        value = bool(value) if value is not None else False
    if value is None:
        return None
    if kind is Kind.NUMBER:
        value = float(value)
    if op in (Op.LIKE, Op.ILIKE):
        return _like(f.value, str(value), op is Op.ILIKE)
    if op is Op.IN:
        return value in f.value
    return _compare(op, value, f.value)


def _is(kind: Kind, wanted: str, value: Any) -> bool:
    if wanted == "null":
        if kind in (Kind.FILE, Kind.MULTI):
            return value is None or value == []
        return value is None
    if kind is Kind.BOOL:
        return (value is True) if wanted == "true" else (value is not True)
    return value is (wanted == "true")  # computed: JSON booleans only


def _json_text(value: Any) -> str | None:
    """``#>> '{}'``: strings as themselves, everything else as JSON text."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return _number_text(value)

    return jsontext.dumps(value).decode().replace(",", ", ").replace(":", ": ")


def _number_text(value: int | float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


def _json_number(value: Any) -> Decimal | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return Decimal(repr(value))
    if isinstance(value, str) and _NUMERIC_TEXT.match(value):
        try:
            return Decimal(value.strip())
        except InvalidOperation:
            return None
    return None


def _json_condition(op: Op, operand: Any, value: Any) -> bool | None:
    if value is None:
        return None
    text = _json_text(value)
    if op in (Op.LIKE, Op.ILIKE):
        return _like(operand, text or "", op is Op.ILIKE)
    if op is Op.IN:
        number = _json_number(value)
        if number is not None and any(o.number is not None and o.number == number for o in operand):
            return True
        return text in {o.text for o in operand}
    if op is Op.CS:
        if not isinstance(value, list):
            return False
        for o in operand:
            hit = o.text in value or (
                o.number is not None
                and any(
                    not isinstance(v, bool) and isinstance(v, (int, float)) and Decimal(repr(v)) == o.number
                    for v in value
                )
            )
            if not hit:
                return False
        return True
    one: JsonOperand = operand
    if one.number is None:
        return _compare(op, text, one.text)
    number = _json_number(value)
    if op is Op.EQ:
        return (number is not None and number == one.number) or text == one.text
    return _compare(op, number, one.number)
