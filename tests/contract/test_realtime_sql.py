"""Realtime matching is the list's SQL: a property test over generated rows and filters.

A realtime subscription decides a change with :func:`storage.query.matching.build_verdicts`
(here over a jsonb array of rows; the hub's source is the stored events):
the stored ``to_jsonb`` row goes back through ``jsonb_populate_record`` into the list's
WHERE clause. Here hypothesis generates rows (Unicode text, numbers, dates, selects,
JSON) and filters, and every row's verdict must equal whether the list's own query
selects it; and ``ilike`` must fold Unicode case (a row containing a fragment matches
the fragment upper-cased).
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg.types.json import Jsonb

from storage.errors import ServiceError
from storage.query import build_where, parse_filter_object, plan_filters
from storage.query.matching import build_verdicts
from storage.schema import PG_TYPES, ColumnMeta, ColumnType, Option, TableMeta

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")
PROFILE = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

OPTS = (Option("o1", "Rot", "red"), Option("o2", "Ärger", "blue"), Option("o3", "ωmega", "green"))
TABLE = TableMeta(1, 990_023, "P", None, (
    ColumnMeta(1, 1, "T", ColumnType.TEXT),
    ColumnMeta(2, 1, "N", ColumnType.NUMBER),
    ColumnMeta(3, 1, "D", ColumnType.DATE),
    ColumnMeta(4, 1, "B", ColumnType.CHECKBOX),
    ColumnMeta(5, 1, "S", ColumnType.SINGLE_SELECT, options=OPTS),
    ColumnMeta(6, 1, "M", ColumnType.MULTI_SELECT, options=OPTS),
    ColumnMeta(7, 1, "R", ColumnType.RELATION, relation_table_id=1),
    ColumnMeta(8, 1, "C", ColumnType.FORMULA, formula="1"),
))
# letters whose case maps one to one (Unicode simple case mapping), and some that do not
FOLDING = "aAbBéÉèÈßσΣςωΩǅǆǄäÄöÖiIİıxyz"
TEXT = st.text(alphabet=st.sampled_from(FOLDING + " _%*-.,()\"'\\1"), max_size=8)
JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(-10, 10, allow_nan=False),
                              TEXT), lambda inner: st.lists(inner, max_size=3), max_leaves=4)
ROW = st.fixed_dictionaries({
    "T": st.one_of(st.none(), TEXT),
    "N": st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False), st.integers(-3, 3).map(float)),
    "D": st.one_of(st.none(), st.datetimes(datetime(2020, 1, 1), datetime(2030, 1, 1), timezones=st.just(timezone.utc))),
    "B": st.one_of(st.none(), st.booleans()),
    "S": st.one_of(st.none(), st.sampled_from(["o1", "o2", "o3"])),
    "M": st.one_of(st.none(), st.lists(st.sampled_from(["o1", "o2", "o3"]), max_size=3, unique=True)),
    "R": st.one_of(st.none(), st.integers(1, 4)),
    "C": st.one_of(st.none(), JSON.map(Jsonb)),
})
OPS = ["eq", "neq", "gt", "gte", "lt", "lte", "like", "ilike", "in", "cs", "is"]
VALUE = st.one_of(TEXT, st.sampled_from(["1", "0", "-2.5", "2025-01-01", "o1", "Ärger", "*ä*", "null", "true",
                                         "false", "(o1,o2)", "{o1}", "(1,2)", "*Σ*", "*é*"]))
FILTER = st.tuples(st.sampled_from([c.name for c in TABLE.columns] + ["id"]), st.booleans(), st.sampled_from(OPS),
                   VALUE).map(lambda t: {t[0]: ("not." if t[1] else "") + t[2] + "." + t[3]})
GROUP = st.tuples(st.sampled_from(["or", "and", "not.or"]), st.lists(FILTER, min_size=1, max_size=3)).map(
    lambda t: {t[0]: "(" + ",".join(f"{k}.{v}" for f in t[1] for k, v in f.items()) + ")"})


@pytest.fixture(scope="module")
def conn() -> Any:
    assert DSN is not None
    with psycopg.connect(DSN) as c:
        c.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(TABLE.schema)))
        cols = [sql.SQL("{} {}").format(sql.Identifier(col.physical),
                                        sql.SQL("jsonb" if col.computed else PG_TYPES[col.type]))
                for col in TABLE.columns]
        c.execute(sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, created_at timestamptz DEFAULT now(),"
                          " updated_at timestamptz DEFAULT now(), {})").format(
            sql.Identifier(TABLE.schema, TABLE.physical), sql.SQL(", ").join(cols)))
        yield c
        c.rollback()


def _verdicts_and_list(c: psycopg.Connection[Any], rows: list[dict[str, Any]], flt: dict[str, str]) -> tuple[
        list[int], list[int]] | None:
    target = sql.Identifier(TABLE.schema, TABLE.physical)
    c.execute(sql.SQL("DELETE FROM {}").format(target))
    for i, row in enumerate(rows, start=1):
        c.execute(sql.SQL("INSERT INTO {} VALUES (%s, now(), now(), {})").format(
            target, sql.SQL(", ").join(sql.Placeholder() * len(row))), (i, *(row[col.name] for col in TABLE.columns)))
    try:
        filters = plan_filters(parse_filter_object(flt), TABLE)
    except ServiceError:
        return None
    where, params = build_where(filters)
    listed = [r[0] for r in c.execute(sql.SQL("SELECT t.id FROM {} AS t WHERE {} ORDER BY t.id").format(
        target, where), params).fetchall()]
    stored = [r[0] for r in c.execute(sql.SQL("SELECT to_jsonb(t) FROM {} AS t ORDER BY t.id").format(target))]
    if not stored:
        return listed, []
    query, vparams = build_verdicts(TABLE, [filters])
    got = c.execute(query, [*vparams, Jsonb(stored)]).fetchall()
    matched = [i for i, _side, verdicts in got if verdicts[0]]
    return listed, matched


@PROFILE
@given(rows=st.lists(ROW, min_size=1, max_size=6), flt=st.one_of(FILTER, GROUP))
def test_realtime_verdicts_are_the_lists_rows(conn: Any, rows: list[dict[str, Any]], flt: dict[str, str]) -> None:
    out = _verdicts_and_list(conn, rows, flt)
    if out is not None:
        listed, matched = out
        assert matched == listed, flt


@PROFILE
@given(rows=st.lists(ROW, min_size=1, max_size=6), at=st.integers(0, 5), size=st.integers(1, 3))
def test_ilike_folds_unicode_case(conn: Any, rows: list[dict[str, Any]], at: int, size: int) -> None:
    texts = [r["T"] for r in rows if r["T"]]
    if not texts:
        return
    text = texts[0]
    fragment = text[at % len(text):][:size]
    # ILIKE compares lower-cased text (Unicode simple case mapping), so a character is
    # upper-cased where that round-trips: not ß (→ SS, a full mapping), ς (Σ lowers to σ),
    # ı (I lowers to i); docs/query.md
    upper = "".join(ch.upper() if len(ch.upper()) == 1 and ch.upper().lower() == ch.lower() else ch
                    for ch in fragment)
    if any(ch in "*%_\\" for ch in upper):
        return
    out = _verdicts_and_list(conn, rows, {"T": f"ilike.*{upper}*"})
    assert out is not None
    listed, matched = out
    assert matched == listed
    assert 1 + next(i for i, r in enumerate(rows) if r["T"] == text) in listed, (text, upper)
