"""The Python filter evaluator (realtime subscriptions) agrees with the SQL the planner emits.

Every filter below runs both ways over the same rows: ``build_where`` in PostgreSQL and
``storage.query.evaluate.matches`` in Python on the values psycopg returns.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from storage.query import build_where, parse_filter_object, plan_filters
from storage.query.evaluate import matches
from storage.schema import PG_TYPES, ColumnMeta, ColumnType, Option, TableMeta

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")

OPTS = (Option("o1", "Red", "red"), Option("o2", "Blue", "blue"), Option("o3", "Green", "green"))
TABLE = TableMeta(1, 990_001, "E", None, (
    ColumnMeta(1, 1, "T", ColumnType.TEXT),
    ColumnMeta(2, 1, "N", ColumnType.NUMBER),
    ColumnMeta(3, 1, "D", ColumnType.DATE),
    ColumnMeta(4, 1, "B", ColumnType.CHECKBOX),
    ColumnMeta(5, 1, "S", ColumnType.SINGLE_SELECT, options=OPTS),
    ColumnMeta(6, 1, "M", ColumnType.MULTI_SELECT, options=OPTS),
    ColumnMeta(7, 1, "R", ColumnType.RELATION, relation_table_id=1),
    ColumnMeta(8, 1, "F", ColumnType.FILE),
    ColumnMeta(9, 1, "C", ColumnType.FORMULA, formula="1"),
))
ROWS: list[tuple[Any, ...]] = [
    ("apple", 1.0, "2024-01-01", True, "o1", ["o1", "o2"], 1, Jsonb([{"url": "https://x/a"}]), Jsonb(5)),
    ("Banana", 2.5, "2024-06-01", False, "o2", ["o2"], 2, Jsonb([]), Jsonb("12")),
    ("a_b%c", -3.0, "2023-12-31", None, None, [], None, None, Jsonb("abc")),
    (None, None, None, None, "o3", None, 3, None, Jsonb(True)),
    ("cherry", 100.0, "2025-03-01T10:00:00Z", True, "o1", ["o3", "o1"], 1, None, Jsonb([1, "x"])),
    ("", 0.0, "2024-01-01T00:00:01Z", False, None, ["o1"], None, None, None),
]
FILTERS = [
    {"T": "eq.apple"}, {"T": "neq.apple"}, {"T": "like.a*"}, {"T": "ilike.B*"}, {"T": "like.a_b%c"},
    {"T": "in.(apple,cherry)"}, {"T": "is.null"}, {"T": "gt.b"}, {"T": "not.like.*e*"},
    {"N": "gt.1"}, {"N": "lte.2.5"}, {"N": "in.(1,100)"}, {"N": "not.gte.0"}, {"N": "is.null"}, {"N": "eq.0"},
    {"D": "gte.2024-01-01"}, {"D": "lt.2024-06-01"}, {"D": "eq.2024-01-01"}, {"D": "not.is.null"},
    {"B": "eq.true"}, {"B": "eq.false"}, {"B": "is.false"}, {"B": "is.null"}, {"B": "not.is.true"},
    {"S": "eq.Red"}, {"S": "in.(o2,o3)"}, {"S": "ilike.*re*"}, {"S": "neq.o1"}, {"S": "is.null"},
    {"M": "eq.o1"}, {"M": "cs.{o1,o2}"}, {"M": "in.(o3,o2)"}, {"M": "is.null"}, {"M": "not.eq.o2"},
    {"R": "eq.1"}, {"R": "in.(2,3)"}, {"R": "is.null"}, {"R": "gt.1"},
    {"F": "is.null"}, {"F": "not.is.null"},
    {"C": "eq.5"}, {"C": "eq.12"}, {"C": "gt.4"}, {"C": "eq.abc"}, {"C": "like.a*"}, {"C": "is.true"},
    {"C": "is.null"}, {"C": "cs.{x}"}, {"C": "cs.{1}"}, {"C": "cs.{1,x}"}, {"M": "not.cs.{o1}"}, {"C": "in.(5,abc)"}, {"C": "not.eq.5"},
    {"id": "gt.3"}, {"N": "gt.0", "T": "like.*a*"},
]


@pytest.fixture(scope="module")
def rows() -> Any:
    assert DSN is not None
    with psycopg.connect(DSN) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(TABLE.schema)))
        cols = [sql.SQL("{} {}").format(sql.Identifier(c.physical), sql.SQL("jsonb" if c.computed else PG_TYPES[c.type]))
                for c in TABLE.columns]
        target = sql.Identifier(TABLE.schema, TABLE.physical)
        conn.execute(sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, created_at timestamptz DEFAULT now(),"
                             " updated_at timestamptz DEFAULT now(), {})").format(target, sql.SQL(", ").join(cols)))
        for i, row in enumerate(ROWS, start=1):
            conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, now(), now(), {})").format(
                target, sql.SQL(", ").join(sql.Placeholder() * len(row))), (i, *row))
        got = conn.execute(sql.SQL("SELECT * FROM {} ORDER BY id").format(target)).fetchall()
        names = [d.name for d in conn.execute(sql.SQL("SELECT * FROM {} LIMIT 0").format(target)).description or []]
        yield conn, [dict(zip(names, r)) for r in got]
        conn.rollback()


@pytest.mark.parametrize("flt", FILTERS, ids=[str(f) for f in FILTERS])
def test_python_evaluation_matches_sql(rows, flt):
    conn, data = rows
    filters = plan_filters(parse_filter_object(flt), TABLE)
    where, params = build_where(filters, alias="t")
    query = sql.SQL("SELECT t.id FROM {} AS t WHERE {} ORDER BY t.id").format(
        sql.Identifier(TABLE.schema, TABLE.physical), where)
    in_sql = [r[0] for r in conn.execute(query, params).fetchall()]
    in_python = [r["id"] for r in data if matches(filters, r)]
    assert in_python == in_sql
