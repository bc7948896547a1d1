"""The SQL of type conversions (storage/convert.py) over a matrix, on a scratch PostgreSQL.

Needs ``WDS_TEST_SCRATCH_DSN`` (the session's PostgreSQL); each test works in its own
schema and drops it. Property: SQL text → number equals the Python reference parse.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg.types.json import Jsonb

from storage import convert
from storage.schema import DATA_TYPES, PG_TYPES, ColumnMeta, ColumnType, Option

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")
T = ColumnType


@pytest.fixture(scope="module")
def conn() -> Iterator[psycopg.Connection[Any]]:
    schema = f"conv_{secrets.token_hex(4)}"
    with psycopg.connect(DSN, autocommit=True) as c:
        c.execute("SET timezone = 'UTC'")
        c.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        c.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
        for statement in convert.helper_functions("http://files.test"):
            c.execute(statement)
        c.execute("CREATE TABLE rel (id bigint PRIMARY KEY, c_9 text)")
        c.execute("INSERT INTO rel VALUES (1, 'Acme'), (2, 'Globex'), (3, 'Globex')")
        c.execute(convert.relation_function(sql.Identifier("rel"), sql.Identifier("c_9")))
        try:
            yield c
        finally:
            c.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def scalar(conn: psycopg.Connection[Any], query: str, *args: Any) -> Any:
    row = conn.execute(query, args).fetchone()
    assert row is not None
    return row[0]


# --------------------------------------------------------------------------- text rules

_NUMBER_ALPHABET = st.sampled_from(list("0123456789") + list(",.eE+-$€£¥ \t%_x") + ["1,234", "e3", "  "])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.lists(_NUMBER_ALPHABET, max_size=12).map("".join), st.text(max_size=12),
                 st.floats(allow_nan=False, allow_infinity=False).map(repr),
                 st.integers(min_value=-10**30, max_value=10**30).map(lambda i: f"{i:,}")))
def test_text_to_number_equals_the_python_reference(conn, text):
    text = text.replace("\x00", "")
    assert scalar(conn, "SELECT pg_temp.wds_to_number(%s)", text) == convert.parse_number_text(text)


@pytest.mark.parametrize(("text", "expected"), [
    ("2024-03-05", "2024-03-05T00:00:00+00:00"),
    ("2024-3-5", "2024-03-05T00:00:00+00:00"),
    ("2024-03-05 14:30", "2024-03-05T14:30:00+00:00"),
    ("2024-03-05T14:30:00Z", "2024-03-05T14:30:00+00:00"),
    ("2024-03-05T14:30:00.25+02:00", "2024-03-05T12:30:00.250000+00:00"),
    ("2024/03/05", "2024-03-05T00:00:00+00:00"),
    ("03/05/2024", "2024-03-05T00:00:00+00:00"),  # US: month first
    ("3/5/2024 2:30 PM", "2024-03-05T14:30:00+00:00"),
    ("05.03.2024", "2024-03-05T00:00:00+00:00"),  # dotted: day first
    ("5 March 2024", "2024-03-05T00:00:00+00:00"),
    ("5th Mar 2024", "2024-03-05T00:00:00+00:00"),
    ("March 5, 2024", "2024-03-05T00:00:00+00:00"),
    ("Sept 5, 2024 09:15", "2024-09-05T09:15:00+00:00"),
    (" 2024-03-05 ", "2024-03-05T00:00:00+00:00"),
    ("2024-02-30", None), ("13/05/2024", None), ("3/5/24", None), ("yesterday", None),
    ("1709647200", None), ("", None), ("March 2024", None), ("2024-03-05 25:00", None),
])
def test_text_to_date(conn, text, expected):
    got = scalar(conn, "SELECT pg_temp.wds_to_date(%s)", text)
    assert (got.astimezone(timezone.utc).isoformat() if got else None) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("true", True), ("YES", True), (" y ", True), ("1", True), ("On", True), ("checked", True),
    ("false", False), ("no", False), ("N", False), ("0", False), ("off", False), ("unchecked", False),
    ("", None), ("maybe", None), ("2", None),
])
def test_text_to_checkbox(conn, text, expected):
    assert scalar(conn, "SELECT pg_temp.wds_to_checkbox(%s)", text) is expected


def test_text_to_record_by_id_then_unique_label(conn):
    got = [scalar(conn, "SELECT pg_temp.wds_to_record(%s)", t) for t in ("1", " 2 ", "Acme", "Globex", "9", "x")]
    assert got == [1, 2, 1, None, None, None]  # "Globex" names two records: no guess


def test_file_text_renders_urls_as_the_api(conn):
    refs = [{"url": "https://x.test/a"}, {"bucket_id": 3, "path": "a b/ü.png", "public": True},
            {"bucket_id": 4, "path": "p.pdf"}, {"bucket": "my b", "path": "q"}]
    assert scalar(conn, "SELECT pg_temp.wds_file_text(%s)", Jsonb(refs)) == (
        "https://x.test/a, http://files.test/storage/v1/object/public/3/a%20b/%C3%BC.png,"
        " http://files.test/storage/v1/object/4/p.pdf, http://files.test/storage/v1/object/my%20b/q")


# --------------------------------------------------------------------------- the 8x8 matrix

OPTS = (Option("o1", "12", "red"), Option("o2", "yes", "blue"), Option("o3", "2024-03-05", "green"))
SAMPLES: dict[ColumnType, list[Any]] = {
    T.TEXT: ["12", "yes", "2024-03-05", "https://x.test/a", "1", "Acme", "", None],
    T.NUMBER: [12.0, 1.0, 0.0, 2.5, None],
    T.DATE: [datetime(2024, 3, 5, tzinfo=timezone.utc), datetime(2024, 3, 5, 14, 30, tzinfo=timezone.utc), None],
    T.CHECKBOX: [True, False, None],
    T.SINGLE_SELECT: ["o1", "o2", "o3", None],
    T.MULTI_SELECT: [["o1"], ["o1", "o2"], [], None],
    T.RELATION: [1, 2, None],
    T.FILE: [Jsonb([{"url": "https://x.test/a"}]), Jsonb([]), None],
}


def _col(t: ColumnType, cid: int = 1) -> ColumnMeta:
    options = OPTS if t in (T.SINGLE_SELECT, T.MULTI_SELECT) else ()
    return ColumnMeta(id=cid, table_id=1, name="v", type=t, options=options,
                      relation_table_id=1 if t is T.RELATION else None)


PAIRS = [(a, b) for a in sorted(DATA_TYPES) for b in [*sorted(DATA_TYPES), T.FORMULA] if a is not b]


@pytest.mark.parametrize(("old", "new"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_every_plan_runs(conn, old, new):
    """Every pair's plan is valid SQL: the loss count and the ALTER run, and a value is lost
    exactly when the ALTER leaves NULL for a non-blank value."""
    table = sql.Identifier(f"m_{old.value}_{new.value}")
    conn.execute(sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, c_1 {})").format(table, sql.SQL(PG_TYPES[old])))
    for i, v in enumerate(SAMPLES[old]):
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(table), (i + 1, v))
    oldc, newc = _col(old), _col(new)
    labels = convert.label_query(oldc, newc, table)
    if labels is not None:
        found = [r[0] for r in conn.execute(labels).fetchall()]
        known = {o.label for o in newc.options} | {o.id for o in newc.options}
        extra = tuple(Option(f"n{i}", label, "gray") for i, label in enumerate(x for x in found if x not in known))
        newc = ColumnMeta(id=1, table_id=1, name="v", type=new, options=newc.options + extra)
    p = convert.plan(oldc, newc)
    converted, lost = conn.execute(convert.loss_query(table, oldc, p)).fetchone()
    lost_ids = [r[0] for r in conn.execute(convert.lost_ids_query(table, oldc, p)).fetchall()]
    blank = {r[0] for r in conn.execute(sql.SQL("SELECT id FROM {} WHERE {}").format(table, p.blank)).fetchall()}
    target_type = "jsonb" if new.computed else PG_TYPES[new]
    conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN c_1 TYPE {} USING {}").format(table, sql.SQL(target_type), p.using))
    after = dict(conn.execute(sql.SQL("SELECT id, c_1 FROM {}").format(table)).fetchall())
    non_null = [i + 1 for i, v in enumerate(SAMPLES[old]) if v is not None]
    assert sorted(i for i in non_null if after[i] is None and i not in blank) == lost_ids
    assert lost == len(lost_ids) and converted == sum(after[i] is not None for i in non_null)
    assert all(after[i + 1] is None for i, v in enumerate(SAMPLES[old]) if v is None)  # NULL stays NULL
    if convert.route(old, new) is convert.Route.NONE:
        assert converted == 0
