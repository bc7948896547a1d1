"""Arithmetic formulas that PostgreSQL computes in the create's INSERT, value for value as
the Python evaluator would.

A formula qualifies when its tree holds only number literals (an integer literal within
±2^53), references to number columns (stored ``double precision``) or to formulas that
qualify, unary ``+``/``-``, the operators ``+``, ``-`` and ``*``, and ``/`` by a constant
other than 0 (by anything else it may be ``#DIV/0!``, a row's error). Why both sides then
agree on every value:

* Every input is a double: a number cell is read as the double it stores
  (``storage.values._decode_number`` gives an ``int`` only when the double is integral and
  exact) and a literal within ±2^53 is exact either way.
* Each operator's Python result is the exact result when it is an integer within ±2^53
  (``storage.formula.operators.num``), else that result rounded once to the nearest double
  (Python's ``float()`` of an ``int``, IEEE arithmetic of two floats, or the true
  division of two ``int``, which Python rounds correctly too). PostgreSQL's ``float8``
  arithmetic returns the exact result correctly rounded, which is the same double. So
  each step, and the chain, matches.
* Blank reads as 0 in arithmetic (``to_number``): ``COALESCE(x, 0)``. A bare reference
  (``{A}``) keeps blank as blank, as the evaluator does.
* The stored JSON: ``to_jsonb(float8)`` writes PostgreSQL's shortest exact form of the
  double (``0.30000000000000004``), and ``to_json`` + orjson write Python's shortest repr
  of the same double, an integral one as an integer: both parse to the same ``numeric``,
  with the same scale. That last part holds only within ±2^53: past it ``to_json`` keeps
  an integral double a float, which orjson writes with ``.0`` (``9007199254740994.0``,
  stored with one decimal) where PostgreSQL writes none. -0 becomes 0 on both sides
  (``numeric`` has no negative zero).
* So the caller takes this path only when no step can leave ±2^53: it bounds every
  intermediate result from the batch's largest inputs (:meth:`SqlArithmetic.bound`
  against :data:`MAX_BOUND`), which also rules out an overflow (Python: infinity, refused
  as ``#NUM!``; PostgreSQL: an error). A product that underflows to 0 (Python: 0;
  PostgreSQL: an error), or a quotient that does, makes PostgreSQL refuse the whole
  statement: nothing is stored, and the caller evaluates in Python instead
  (:class:`OutOfRange`).

Everything else (division by a reference, ``%``, ``^``, functions, text, dates, other
column kinds) stays with the Python evaluator: the caller takes this path only when every
computed column of the create qualifies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from psycopg import sql

from ..errors import InvalidFormula
from .compiled import compile_formula
from .nodes import Chain, Field, Node, Num, Unary

MAX_EXACT = 2**53
MAX_BOUND = float(2**53)  # every step within ±2^53 (see the module's doc)
MIN_LITERAL = 1e-300
MAX_NODES = 64  # per column, references inlined: longer formulas stay with the evaluator
SQL_OPERATORS = frozenset({"+", "-", "*", "/"})  # "/" by a constant other than 0 only


class OutOfRange(Exception):
    """PostgreSQL refused the statement: a step overflowed or a product underflowed to 0
    (nothing was stored; evaluate in Python, which answers those rows as the evaluator does)."""


@dataclass(frozen=True)
class _Lit:
    value: float


@dataclass(frozen=True)
class _Col:
    """A number data column: ``None`` (blank) in SQL as NULL."""

    column_id: int


@dataclass(frozen=True)
class _Unary:
    """``number``: ``to_number`` of an operand (blank → 0); ``negate``: its negation."""

    op: str
    inner: _Expr


@dataclass(frozen=True)
class _Op:
    op: str
    left: _Expr
    right: _Expr


_Expr = _Lit | _Col | _Unary | _Op


def _size(e: _Expr) -> int:
    if isinstance(e, (_Lit, _Col)):
        return 1
    if isinstance(e, _Unary):
        return 1 + _size(e.inner)
    return 1 + _size(e.left) + _size(e.right)


def _nullable(e: _Expr) -> bool:
    return isinstance(e, _Col)


def _number(e: _Expr) -> _Expr:
    """The operand as arithmetic reads it (blank → 0)."""
    return _Unary("number", e) if _nullable(e) else e


def _reads(e: _Expr, out: set[int]) -> None:
    if isinstance(e, _Col):
        out.add(e.column_id)
    elif isinstance(e, _Unary):
        _reads(e.inner, out)
    elif isinstance(e, _Op):
        _reads(e.left, out)
        _reads(e.right, out)


def _bound(e: _Expr, largest: Mapping[int, float]) -> tuple[float, float]:
    """Upper bounds over rows whose column ``c`` is at most ``largest[c]`` in absolute
    value (a missing column: blank): of ``|e|``, and of every step in it, ``e`` included."""
    if isinstance(e, _Lit):
        return abs(e.value), abs(e.value)
    if isinstance(e, _Col):
        top = largest.get(e.column_id, 0.0)
        return top, top
    if isinstance(e, _Unary):
        return _bound(e.inner, largest)
    (left, left_worst), (right, right_worst) = _bound(e.left, largest), _bound(e.right, largest)
    if e.op == "*":
        value = left * right if left and right else 0.0
    elif e.op == "/":  # by a constant other than 0 (_convert)
        value = left / abs(_constant(e.right) or math.inf)
    else:
        value = left + right
    return value, max(value, left_worst, right_worst)


def _constant(e: _Expr) -> float | None:
    """The value of an expression without references, else ``None``."""
    if isinstance(e, _Lit):
        return e.value
    if isinstance(e, _Unary):
        inner = _constant(e.inner)
        if inner is None:
            return None
        return inner if e.op == "number" else -inner
    return None


def _render(e: _Expr, column: Mapping[int, sql.Composable]) -> sql.Composable:
    if isinstance(e, _Lit):
        return sql.SQL("{}::float8").format(sql.Literal(repr(e.value)))
    if isinstance(e, _Col):
        return column.get(e.column_id, sql.SQL("NULL::float8"))
    if isinstance(e, _Unary):
        form = "COALESCE({}, 0::float8)" if e.op == "number" else "(- {})"
        return sql.SQL(form).format(_render(e.inner, column))
    return sql.SQL("({} {} {})").format(_render(e.left, column), sql.SQL(e.op), _render(e.right, column))


@dataclass(frozen=True)
class SqlArithmetic:
    """The create's formula columns as PostgreSQL expressions (see the module's doc)."""

    columns: dict[int, _Expr]  # formula column id → its expression (references inlined)
    reads: frozenset[int]  # the number data columns they read

    def bound(self, largest: Mapping[int, float]) -> float:
        """The largest ``|value|`` any step may reach, given each read column's largest
        ``|value|`` in the batch (past :data:`MAX_BOUND`: keep the Python path)."""
        return max((_bound(e, largest)[1] for e in self.columns.values()), default=0.0)

    def expressions(self, column: Mapping[int, sql.Composable]) -> dict[int, sql.Composable]:
        """Per formula column, its value as ``jsonb`` in SQL; ``column`` maps a read data
        column id to the SQL of its typed input value (``x."c_<id>"``); a read column the
        rows do not write is blank."""
        return {cid: sql.SQL("to_jsonb({})").format(_render(e, column)) for cid, e in self.columns.items()}

    def key(self) -> tuple[tuple[int, str], ...]:
        """What identifies these expressions in a statement cache."""
        return tuple((cid, repr(e)) for cid, e in self.columns.items())


@lru_cache(maxsize=1024)
def plan_sql_arithmetic(
    formulas: tuple[tuple[int, str, str], ...], number_columns: tuple[tuple[str, int], ...],
) -> SqlArithmetic | None:
    """The create's formula columns, in evaluation order (``(id, name, source)``, Excel
    formulas), as one :class:`SqlArithmetic`, or ``None`` when any of them does not
    qualify. ``number_columns``: ``(name, id)`` of the table's number data columns.
    Cached: a table's creates ask the same question every time."""
    numbers = dict(number_columns)
    done: dict[str, _Expr] = {}
    by_id: dict[int, _Expr] = {}
    for cid, name, source in formulas:
        try:
            tree = compile_formula(source).tree
        except InvalidFormula:  # the evaluator answers it (the column's error)
            return None
        if tree is None:
            return None
        expr = _convert(tree, done, numbers)
        if expr is None or _size(expr) > MAX_NODES:
            return None
        done[name] = by_id[cid] = expr
    reads: set[int] = set()
    for e in by_id.values():
        _reads(e, reads)
    return SqlArithmetic(by_id, frozenset(reads))


def _convert(node: Node, done: Mapping[str, _Expr], number_columns: Mapping[str, int]) -> _Expr | None:
    if isinstance(node, Num):
        value = node.value
        if isinstance(value, bool) or (isinstance(value, int) and abs(value) > MAX_EXACT):
            return None  # exact in Python, rounded in SQL before the operation: could differ
        as_float = float(value)
        if not math.isfinite(as_float) or (as_float and abs(as_float) < MIN_LITERAL):
            return None  # a subnormal literal: PostgreSQL's float8 input may refuse it
        return _Lit(as_float)
    if isinstance(node, Field):
        if node.name in done:
            return done[node.name]
        if node.name in number_columns:
            return _Col(number_columns[node.name])
        return None
    if isinstance(node, Unary):
        inner = _convert(node.operand, done, number_columns)
        if inner is None:
            return None
        return _Unary("negate", _number(inner)) if node.op == "-" else _number(inner)
    if isinstance(node, Chain):
        if not node.rest:
            return _convert(node.first, done, number_columns)
        if any(op not in SQL_OPERATORS for op, _ in node.rest):
            return None
        value = _convert(node.first, done, number_columns)
        if value is None:
            return None
        out: _Expr = _number(value)
        for op, child in node.rest:
            right = _convert(child, done, number_columns)
            if right is None or (op == "/" and not _constant(right)):
                return None  # a division by a reference may be #DIV/0!: a row's error, the evaluator's
            out = _Op(op, out, _number(right))
        return out
    return None  # a function call, text, booleans


__all__ = ["MAX_BOUND", "OutOfRange", "SqlArithmetic", "plan_sql_arithmetic"]
