"""Arithmetic formulas computed by PostgreSQL (storage/formula/insql.py) give the Python
evaluator's values, value for value and as the same stored JSON.

The property test draws chains of arithmetic formulas and rows of doubles (with blanks,
-0, integers past 2^53, tiny and huge values), computes them both ways on the scratch
database, and compares the ``jsonb`` text each side stores. PostgreSQL may refuse a
statement (a product that underflows); then the caller evaluates in Python. The caller
takes the path only when the plan's bound keeps every step within ±2^53, so the property
is: where the bound allows the batch, equal or refused for an underflow.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from storage.formula import compile_formula
from storage.formula.errors import FormulaError
from storage.formula.insql import MAX_BOUND, plan_sql_arithmetic
from storage.values import _decode_number

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
NUMBERS = (("A", 1), ("B", 2))
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _plan(*formulas: str):
    return plan_sql_arithmetic(tuple((10 + i, f"F{i}", f) for i, f in enumerate(formulas)), NUMBERS)


@pytest.mark.parametrize("formulas", [
    ("{A}+1", "{F0}*2", "{F1}-3"),
    ("-{A}", "+{B}", "{A}", "{F2}", "({A} - {B}) * (2.5 + {A}) * -0.1"),
    ("7", "9007199254740992 * {A}", "{A} - -{B}"),
    ("9007199254740993 + {A}",),  # the parser reads an integer past 2^53 as the nearest double, as SQL does
    ("{A} / 2", "{F0} * 3 / -0.5", "({A} + {B}) / 100"),  # by a constant other than 0
])
def test_plain_arithmetic_over_number_columns_qualifies(formulas):
    plan = _plan(*formulas)
    assert plan is not None
    assert set(plan.columns) == {10 + i for i in range(len(formulas))}


@pytest.mark.parametrize("formulas", [
    ("{A} / {B}",), ("2 / {A}",),  # #DIV/0! is a row's error
    ("{A} / 0",), ("{A} / (1 - 1)",), ("{A} / -0",),
    ("{A} % 2",), ("{A} ^ 2",),
    ("ROUND({A}, 1)",), ("{A} & \"x\"",), ("{A} > 1",), ("\"3\" + 1",), ("TRUE + 1",),
    ("{Text} + 1",),  # not a number column: text would be parsed as a number
    ("{id} + 1",),  # the record id
    ("{A} * 1e-320",),  # a subnormal literal
    ("{A}+1", "ROUND({F0}, 2)"),  # one column that does not qualify keeps the whole create in Python
    ("{F1} + 1", "{A}"),  # a formula read before it is computed
    ("{A} +",),  # does not compile: the evaluator answers it
])
def test_everything_else_stays_with_the_evaluator(formulas):
    assert _plan(*formulas) is None


def test_a_long_formula_stays_with_the_evaluator():
    assert _plan("+".join(["{A}"] * 40)) is None  # 79 nodes
    assert _plan("{A}*2", "{F0}+{F0}", "{F1}+{F1}", "{F2}+{F2}", "{F3}+{F3}", "{F4}+{F4}") is None  # inlined: 2^n


def test_the_bound_covers_every_step():
    plan = _plan("{A} * {A} - {B}", "{F0} * 10")
    assert plan is not None
    assert plan.bound({1: 3.0, 2: 4.0}) == (3 * 3 + 4) * 10
    assert plan.bound({}) == 10  # every input blank: the literal is the largest step
    assert plan.bound({1: 1e200, 2: 0.0}) > MAX_BOUND
    assert plan.bound({1: 2.0**26, 2: 0.0}) == 2.0**52 * 10 > MAX_BOUND  # the last step leaves ±2^53
    small = _plan("{A} / 0.001")
    assert small is not None and small.bound({1: 5.0}) == pytest.approx(5000)  # a division may grow the value


# --------------------------------------------------------------------------- the property

def _python(formulas: list[str], a: float | None, b: float | None) -> list[Any]:
    """What the pipeline stores for one row, as the ledger computes it: each formula reads
    the number cells as decoded from their doubles, and the earlier formulas' results."""
    fields: dict[str, Any] = {"A": None if a is None else _decode_number(a),
                              "B": None if b is None else _decode_number(b)}
    out = []
    for i, source in enumerate(formulas):
        try:
            value = compile_formula(source).evaluate(fields, now=NOW)
        except FormulaError as exc:
            value = exc.code
        fields[f"F{i}"] = value
        out.append(value)
    return out


OPERAND = st.one_of(
    st.sampled_from(["{A}", "{B}"]),
    st.integers(-(2**53), 2**53).map(str),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12).filter(
        lambda f: f == 0 or abs(f) > 1e-300).map(repr),
)


DIVISOR = st.one_of(  # constants other than 0: a division by anything else stays with the evaluator
    st.integers(1, 10**6).map(str), st.integers(1, 10**6).map(lambda i: f"-{i}"),
    st.floats(min_value=1e-12, max_value=1e12).map(repr), st.sampled_from(["3", "0.1", "7.5", "1e-7", "-3"]),
)


def _expr(refs: list[str]) -> st.SearchStrategy[str]:
    leaf = st.one_of(OPERAND, st.sampled_from(refs)) if refs else OPERAND
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["+", "-", "*"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
            st.tuples(inner, DIVISOR).map(lambda t: f"({t[0]} / {t[1]})"),
            inner.map(lambda e: f"-{e}"),
            inner.map(lambda e: f"+{e}"),
        ),
        max_leaves=6,
    )


@st.composite
def chains(draw: st.DrawFn) -> list[str]:
    formulas: list[str] = []
    for i in range(draw(st.integers(1, 3))):
        formulas.append(draw(_expr([f"{{F{j}}}" for j in range(i)])))
    return formulas


DOUBLE = st.one_of(
    st.none(), st.just(0.0), st.just(-0.0), st.just(float(2**53)), st.just(float(2**53 + 2)),
    st.floats(allow_nan=False, allow_infinity=False),  # mostly past the bound: kept in Python
    st.integers(-(2**60), 2**60).map(float),
    st.integers(-(2**20), 2**20).map(float),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e-6, max_value=1e-6),
)


@pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(formulas=chains(), rows=st.lists(st.tuples(DOUBLE, DOUBLE), min_size=1, max_size=6))
def test_postgresql_stores_what_the_evaluator_computes(formulas, rows):
    """Where a batch's bound lets the caller compute it in PostgreSQL, every value is the
    evaluator's (or PostgreSQL refuses the statement for an underflow)."""
    plan = _plan(*formulas)
    if plan is None:  # inlined past MAX_NODES: the evaluator's, nothing to compare
        assert any(len(f) > 40 for f in formulas)
        return
    exprs = plan.expressions({1: sql.Identifier("x", "a"), 2: sql.Identifier("x", "b")})
    query = sql.SQL("SELECT {} FROM (VALUES {}) AS x(a, b)").format(
        sql.SQL(", ").join(sql.SQL("{}::text").format(e) for e in exprs.values()),
        sql.SQL(", ").join(sql.SQL("(%s::float8, %s::float8)") for _ in rows))
    largest = {1: max((abs(a) for a, _ in rows if a is not None), default=0.0),
               2: max((abs(b) for _, b in rows if b is not None), default=0.0)}
    if plan.bound(largest) > MAX_BOUND:
        return  # the caller keeps such a batch in Python
    with psycopg.connect(DSN, autocommit=True) as conn:
        try:
            got = conn.execute(query, [v for row in rows for v in row]).fetchall()
        except psycopg.errors.NumericValueOutOfRange:
            assert "underflow" in _last_error(conn, query, rows), formulas
            return
        for (a, b), stored in zip(rows, got, strict=True):
            expected = _python(formulas, a, b)
            for source, value, text in zip(formulas, expected, stored, strict=True):
                if isinstance(value, str):  # an error value (#NUM!): PostgreSQL must have refused
                    pytest.fail(f"{source} with A={a!r} B={b!r}: Python {value}, PostgreSQL {text}")
                want = None if value is None else conn.execute(
                    "SELECT %s::jsonb::text", [orjson.dumps(value).decode()]).fetchone()[0]
                assert text == want, f"{source} with A={a!r} B={b!r}: Python {value!r}, PostgreSQL {text}"


def _last_error(conn: psycopg.Connection, query: sql.Composable, rows: list[tuple[Any, Any]]) -> str:
    try:
        conn.execute(query, [v for row in rows for v in row])
    except psycopg.errors.NumericValueOutOfRange as exc:
        return str(exc)
    return ""


@pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")
def test_the_edge_values_by_hand():
    """The cases the argument in the module's doc leans on, checked by name: what
    PostgreSQL stores, and that it is what the evaluator's result stores."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        for source, a, want in [
            ("{A} + 1", 0.1, "1.1"),
            ("{A} * 3", 0.1, "0.30000000000000004"),
            ("{A} * -1", 0.0, "0"),  # -0 → 0
            ("-{A}", 0.0, "0"),
            ("{A} + 1", None, "1"),  # blank is 0
            ("{A}", None, None),  # a bare reference keeps blank
            ("{A} * 2", float(2**52 - 1), str((2**52 - 1) * 2)),  # just within 2^53
            ("{A} + 1", float(2**53 - 1), "9007199254740992"),
            ("{A} * 1e-7", 1.5, "0.00000015"),
            ("{A} * 1.5", 3.0, "4.5"),
            ("{A} / 3", 1.0, "0.3333333333333333"),
            ("{A} / 0.1", 0.3, "2.9999999999999996"),
            ("{A} / 2", 7.0, "3.5"),
            ("{A} / -2", 0.0, "0"),
        ]:
            plan = _plan(source)
            assert plan is not None
            (expr,) = plan.expressions({1: sql.SQL("%(a)s::float8")}).values()
            got = conn.execute(sql.SQL("SELECT {}::text").format(expr), {"a": a}).fetchone()[0]
            (value,) = _python([source], a, None)
            stored = None if value is None else conn.execute(
                "SELECT %s::jsonb::text", [orjson.dumps(value).decode()]).fetchone()[0]
            assert got == stored == want, (source, a, got, stored)


@pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")
def test_past_2_53_the_two_would_store_different_text_so_the_bound_keeps_python():
    """Why the bound is 2^53 and not the largest double: an integral double past 2^53 is
    stored by the evaluator with one decimal and by PostgreSQL without."""
    a = float(2**53 + 2)
    plan = _plan("{A}")
    assert plan is not None and plan.bound({1: a}) > MAX_BOUND
    (expr,) = plan.expressions({1: sql.SQL("%(a)s::float8")}).values()
    with psycopg.connect(DSN, autocommit=True) as conn:
        got = conn.execute(sql.SQL("SELECT {}::text").format(expr), {"a": a}).fetchone()[0]
        stored = conn.execute("SELECT %s::jsonb::text", [orjson.dumps(_python(["{A}"], a, None)[0]).decode()]).fetchone()[0]
    assert (got, stored) == ("9007199254740994", "9007199254740994.0")
