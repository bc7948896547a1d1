"""Filter targets: resolving a column name, and typing a filter value for its column.

A :class:`Target` says how a column is stored (:class:`Kind`), which decides both the
operators it accepts (:mod:`storage.query.plan`) and the SQL emitted for it
(:mod:`storage.query.build`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any

from storage.errors import InvalidValue, UnknownColumn, UnknownOperator
from storage.schema import SYSTEM_COLUMNS, ColumnMeta, ColumnType, TableMeta
from storage.values import invalid_option, parse_datetime


class Kind(StrEnum):
    """How a filter target is stored, which decides the SQL emitted for it."""

    TEXT = "text"
    NUMBER = "number"
    DATE = "date"
    BOOL = "bool"
    SELECT = "select"
    MULTI = "multi"
    INT = "int"  # relation and the system id
    FILE = "file"
    JSON = "json"  # computed columns of value type json (and ones described without one)


_KIND_BY_TYPE = {
    ColumnType.TEXT: Kind.TEXT,
    ColumnType.NUMBER: Kind.NUMBER,
    ColumnType.DATE: Kind.DATE,
    ColumnType.CHECKBOX: Kind.BOOL,
    ColumnType.SINGLE_SELECT: Kind.SELECT,
    ColumnType.MULTI_SELECT: Kind.MULTI,
    ColumnType.RELATION: Kind.INT,
    ColumnType.FILE: Kind.FILE,
}

# a computed column's scalar value type → the kind it is filtered and sorted as
_KIND_BY_VALUE_TYPE = {"number": Kind.NUMBER, "text": Kind.TEXT, "date": Kind.DATE, "boolean": Kind.BOOL}

NUMBER_RE = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")
_INT_RE = re.compile(r"^[-+]?\d{1,19}$")
_INT_RANGE = (-(2**63), 2**63 - 1)


@dataclass(frozen=True, slots=True)
class Target:
    """A resolved column: its API name, physical name, storage kind and metadata."""

    name: str
    physical: str
    kind: Kind
    column: ColumnMeta | None = None  # None for system columns
    # a computed column read as this scalar value type (storage/ddl.py computed_value_expr)
    value_type: str | None = None


@dataclass(frozen=True, slots=True)
class JsonOperand:
    """A filter value for a computed column: its text, and its number when it is one."""

    text: str
    number: Decimal | None


def resolve_target(table: TableMeta, name: str) -> Target:
    """Resolve a column name (or a system column) of ``table``.

    Raises:
        UnknownColumn: no such column.
    """
    if name == "id":
        return Target("id", "id", Kind.INT)
    if name in SYSTEM_COLUMNS:
        return Target(name, name, Kind.DATE)
    col = table.column(name)
    if col is None:
        raise UnknownColumn(f"unknown column {name!r}")
    if col.computed:
        value_type = col.scalar_value_type
        if value_type is None:
            return Target(col.name, col.physical, Kind.JSON, col)
        return Target(col.name, col.physical, _KIND_BY_VALUE_TYPE[value_type], col, value_type)
    return Target(col.name, col.physical, _KIND_BY_TYPE[col.type], col)


def like_pieces(raw: str) -> list[str]:
    """A filter pattern cut at its wildcards: the literal texts between them, in order
    (``n`` wildcards give ``n + 1`` pieces, some perhaps empty). ``*`` and ``%`` are any
    text; a backslash before ``*``, ``%`` or another backslash makes that character literal;
    every other character (``_`` and a backslash before anything else included) is itself.

    >>> like_pieces("100\\%*off*"), like_pieces("C:\\temp\\*"), like_pieces("a_b")
    (['100%', 'off', ''], ['C:\\temp*'], ['a_b'])
    """
    pieces: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and raw[i + 1:i + 2] in ("*", "%", "\\"):
            current.append(raw[i + 1])
            i += 2
            continue
        if ch in "*%":
            pieces.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    pieces.append("".join(current))
    return pieces


def like_pattern(raw: str) -> str:
    """A filter pattern (:func:`like_pieces`) as a SQL LIKE pattern: its wildcards as ``%``,
    every literal ``%``, ``_`` and backslash escaped.

    >>> like_pattern("a_b*c%d\\\\e\\*")
    'a\\\\_b%c%d\\\\\\\\e*'
    """
    return "%".join(piece.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
                    for piece in like_pieces(raw))


def like_matches(pieces: list[str], text: str) -> bool:
    """Whether ``text`` matches the pattern cut into ``pieces`` (:func:`like_pieces`), as
    LIKE would: it starts with the first piece, ends with the last, and holds the others
    in order between them. Each piece is found at its leftmost place after the one before
    (for wildcards that match any text, the leftmost place never loses a match), so the
    cost is at most the text's length times the pattern's, whatever the pattern: a
    backtracking regex of ``.*a.*a.*a…`` takes exponential time on a label that fails.
    """
    if len(pieces) == 1:
        return text == pieces[0]
    first, last = pieces[0], pieces[-1]
    if len(first) + len(last) > len(text) or not text.startswith(first) or not text.endswith(last):
        return False
    pos, end = len(first), len(text) - len(last)
    for piece in pieces[1:-1]:
        found = text.find(piece, pos, end)
        if found < 0:
            return False
        pos = found + len(piece)
    return True


def typed_value(target: Target, raw: str) -> Any:
    """Type one filter value for ``target``; errors name the column, never echo SQL."""
    kind = target.kind
    if kind is Kind.TEXT:
        return raw
    if kind is Kind.NUMBER:
        number = parse_number(raw)
        if number is None:
            raise InvalidValue(f"column {target.name!r} expects a number, got {raw!r}")
        return number
    if kind is Kind.DATE:
        try:
            return parse_datetime(raw)
        except (ValueError, OverflowError):
            raise InvalidValue(f"column {target.name!r} expects an ISO date, got {raw!r}") from None
    if kind is Kind.INT:
        text = raw.strip()
        value = int(text) if _INT_RE.match(text) else None
        if value is None or not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            raise InvalidValue(f"column {target.name!r} expects an integer id, got {raw!r}")
        return value
    if kind is Kind.BOOL:
        text = raw.strip().lower()
        if text in ("true", "1"):
            return True
        if text in ("false", "0"):
            return False
        raise InvalidValue(f"column {target.name!r} expects true or false, got {raw!r}")
    if kind in (Kind.SELECT, Kind.MULTI):
        assert target.column is not None
        opt = target.column.option_by_id_or_label(raw)
        if opt is None:
            raise invalid_option(target.column, raw)
        return opt.id
    if kind is Kind.JSON:
        number = parse_number(raw)
        return JsonOperand(raw, None if number is None else Decimal(repr(number)))
    raise UnknownOperator(f"column {target.name!r} cannot be compared")  # file


def parse_number(raw: str) -> float | None:
    """A finite number written in plain decimal or exponent notation, else None."""
    text = raw.strip()
    if not NUMBER_RE.match(text):
        return None
    number = float(text)
    return number if math.isfinite(number) else None


