"""Computed columns are indexed like data columns of their value type (issue #24 item 1):
a number formula's sorted and range-filtered pages read its ``(typed value, id)`` btree
without sorting, and contains search on a text formula reads its trigram index.

Computed values are written straight into the physical table (running the pipeline for
thousands of rows would take far longer); the table and its columns are made through the
API, so the value types and the DDL under test are the ones the service makes.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
import pytest
from psycopg import sql

from storage import ddl
from tests.utils.explain import explain_list

ROWS = 5_000
DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")


async def _explain(ws_id: int, table_id: int, params: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return await explain_list(DSN, ws_id, table_id, params)


@pytest.fixture
def big(ws):
    t = ws.create_table("Big", [
        {"name": "Score", "type": "number"},
        {"name": "Double", "type": "formula", "formula": "{Score} * 2"},
        {"name": "Label", "type": "formula", "formula": 'IF({Score} > 100, "big ", "small ") & {Score}'},
        {"name": "Due", "type": "formula", "formula": 'DATEADD(TODAY(), {Score}, "days")'},
    ])
    cols = {c["name"]: c for c in t["columns"]}
    ident = {n: sql.Identifier(f"c_{c['id']}") for n, c in cols.items()}
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.{} ({}, {}, {}, {}) SELECT (i %% 300)::float8, to_jsonb((i %% 300) * 2),"
                " to_jsonb(CASE WHEN i %% 997 = 0 THEN 'aqzb ' || i ELSE md5(i::text) END),"
                " to_jsonb(to_char(timestamptz '2024-01-01 00:00Z' + i * interval '1 hour',"
                "   'YYYY-MM-DD\"T\"HH24:MI:SS') || '+00:00')"
                " FROM generate_series(1, %s) AS i"
            ).format(sql.Identifier(f"ws_{ws.id}"), sql.Identifier(f"t_{t['id']}"),
                     ident["Score"], ident["Double"], ident["Label"], ident["Due"]),
            (ROWS,),
        )
        conn.execute(sql.SQL("VACUUM ANALYZE {}.{}").format(sql.Identifier(f"ws_{ws.id}"),
                                                            sql.Identifier(f"t_{t['id']}")))
    return ws, t, cols


def _scans(nodes: list[dict[str, Any]]) -> list[str | None]:
    return [n.get("Index Name") for n in nodes if "Index" in n["Node Type"]]


def test_value_types_are_inferred_and_shown(big):
    _, _, cols = big
    assert {n: c.get("result_type") for n, c in cols.items()} == {
        "Score": None, "Double": "number", "Label": "text", "Due": "date"}


@pytest.mark.asyncio
@pytest.mark.parametrize("column", ["Double", "Due"])
@pytest.mark.parametrize("params", [
    [("order", "{c}.asc")], [("order", "{c}.desc")],
    [("{c}", "gte.{v}"), ("order", "{c}.asc")], [("{c}", "lt.{v}"), ("order", "{c}.desc")],
])
async def test_sorted_and_ranged_pages_read_the_typed_index(big, column, params):
    ws, t, cols = big
    v = "580" if column == "Double" else "2024-01-02T00:00:00Z"
    query = [(k.format(c=column), val.format(c=column, v=v)) for k, val in params] + [("limit", "20")]
    nodes = await _explain(ws.id, t["id"], query)
    types = [n["Node Type"] for n in nodes]
    assert not any("Sort" in n for n in types), types
    assert not any(n == "Seq Scan" for n in types), types
    assert _scans(nodes) == [f"t_{t['id']}_c_{cols[column]['id']}"], types


@pytest.mark.asyncio
async def test_contains_search_on_a_text_formula_reads_its_trigram_index(big):
    ws, t, cols = big
    nodes = await _explain(ws.id, t["id"], [("Label", "ilike.*qzb*")])
    types = [n["Node Type"] for n in nodes]
    assert _scans(nodes) == [ddl.trigram_index_name(t["id"], cols["Label"]["id"])], types
    assert "Seq Scan" not in types
    r = ws.api.get(f"/tables/{t['id']}/records", params={"Label": "ilike.*QZB*", "limit": "1000"},
                   headers={"Prefer": "count=exact"})
    assert r.status_code == 200, r.text
    assert r.headers["X-Total-Count"] == str(ROWS // 997)


@pytest.mark.asyncio
async def test_equality_on_a_text_formula_reads_its_btree(big):
    ws, t, cols = big
    nodes = await _explain(ws.id, t["id"], [("Label", "eq.aqzb 997")])
    assert _scans(nodes) == [f"t_{t['id']}_c_{cols['Label']['id']}"], [n["Node Type"] for n in nodes]


def test_answers_match_the_values(big):
    ws, t, _ = big
    r = ws.api.get(f"/tables/{t['id']}/records",
                   params={"Double": "gte.590", "order": "Double.desc,id.asc", "limit": "5"},
                   headers={"Prefer": "count=exact"})
    assert r.status_code == 200, r.text
    assert [x["fields"]["Double"] for x in r.json()["records"]] == [598] * 5
    # (i % 300) * 2 >= 590 for i % 300 in 295..299: 5 values, each on ROWS/300 rows (or one more)
    assert int(r.headers["X-Total-Count"]) == sum(1 for i in range(1, ROWS + 1) if (i % 300) * 2 >= 590)
    # paging by cursor over the typed value walks every row once, in order
    seen: list[tuple[int, int]] = []
    params = {"Double": "lt.10", "order": "Double.asc", "limit": "7"}
    while True:
        page = ws.api.get(f"/tables/{t['id']}/records", params=params)
        assert page.status_code == 200, page.text
        body = page.json()
        seen.extend((x["fields"]["Double"], x["id"]) for x in body["records"])
        if not body.get("next"):
            break
        params = {**params, "after": body["next"]}
    assert seen == sorted(seen)
    assert len(seen) == sum(1 for i in range(1, ROWS + 1) if (i % 300) * 2 < 10)
    bad = ws.api.get(f"/tables/{t['id']}/records", params={"Double": "gt.abc"})
    assert bad.status_code == 400 and bad.json()["code"] == "INVALID_VALUE", bad.text


@pytest.mark.parametrize("text", [
    "2024-01-01T00:00:00+00:00", "2024-01-01T00:00:00Z", "2024-01-01 10:30-05", "2024-01-01T10:30:00.123456+0530",
    "1850-01-01T00:00:00+00:09:21", "2024-02-30T00:00:00Z", "2024-01-01T00:00:00", "2024-01-01", "soon",
    "2024-01-01T25:00:00Z", "2024-13-01T00:00:00Z",
])
def test_a_date_fits_in_python_exactly_when_the_index_reads_it(text):
    from storage.schema import value_fits

    with psycopg.connect(DSN, autocommit=True) as conn:
        read = conn.execute("SELECT wds.json_instant(to_jsonb(%s::text))", (text,)).fetchone()[0]
    assert (read is not None) is value_fits("date", text), (text, read)


_MAX = 1.7976931348623157e308


@pytest.mark.parametrize("value", [
    0, 1, -2.5, 1e308, _MAX, -_MAX, 5e-324, -5e-324, 2**53 + 1, 123456789012345678901234567890,
    int(_MAX), int(_MAX) + 1, -int(_MAX) - 1, 10**400, -(10**400),
])
def test_a_number_fits_in_python_exactly_when_the_index_reads_it(value):
    """The float8 key reads a stored number as blank exactly when no double holds it, and
    ``value_fits`` (the pipeline's check) refuses exactly those: the cast never raises."""
    from storage.schema import value_fits

    text = repr(value)  # the jsonb a Python number is stored as
    with psycopg.connect(DSN, autocommit=True) as conn:
        read = conn.execute(sql.SQL("SELECT {} FROM (SELECT %s::jsonb AS v) AS s").format(
            ddl.computed_value_expr(sql.Identifier("v"), "number")), (text,)).fetchone()[0]
    assert (read is not None) is value_fits("number", value), (text, read)
    if read is not None:
        assert read == float(value)


@pytest.mark.parametrize("text", ["1e400", "-1e400", "1e-400", "2.4e-324", "-2.4e-324"])
def test_a_number_no_double_holds_reads_as_blank(text):
    with psycopg.connect(DSN, autocommit=True) as conn:
        read = conn.execute(sql.SQL("SELECT {} FROM (SELECT %s::jsonb AS v) AS s").format(
            ddl.computed_value_expr(sql.Identifier("v"), "number")), (text,)).fetchone()[0]
    assert read is None


def test_a_number_no_double_holds_is_kept_and_reads_as_blank(big):
    """A computed number cell may hold a jsonb number beyond a double (written by an older
    version, or a step's 400-digit integer): the float8 key reads it as blank, so the row
    can be written, listed, sorted and filtered, and the cell keeps it."""
    ws, t, cols = big
    double = f"c_{cols['Double']['id']}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {}.{} SET {} = %s::jsonb WHERE id IN (1, 2)").format(
            sql.Identifier(f"ws_{ws.id}"), sql.Identifier(f"t_{t['id']}"), sql.Identifier(double)),
            ("1e400",))
        tiny = conn.execute(sql.SQL("INSERT INTO {}.{} ({}) VALUES (%s::jsonb) RETURNING id").format(
            sql.Identifier(f"ws_{ws.id}"), sql.Identifier(f"t_{t['id']}"), sql.Identifier(double)),
            ("-1e-400",)).fetchone()[0]
        kept = conn.execute(sql.SQL("SELECT count(*) FROM {}.{} WHERE {} IN ('1e400', '-1e-400')").format(
            sql.Identifier(f"ws_{ws.id}"), sql.Identifier(f"t_{t['id']}"), sql.Identifier(double))).fetchone()[0]
    assert kept == 3
    url = f"/tables/{t['id']}/records"
    first = ws.api.get(url, params={"order": "Double.desc.nullsfirst", "limit": "3", "select": "Double"})
    assert first.status_code == 200, first.text
    assert [r["id"] for r in first.json()["records"]] == [tiny, 2, 1]  # blank first, then by id
    ranged = ws.api.get(url, params={"Double": "gt.1e300"}, headers={"Prefer": "count=exact"})
    assert ranged.status_code == 200 and ranged.headers["X-Total-Count"] == "0", ranged.text
    blank = ws.api.get(url, params={"Double": "is.null", "select": ""}, headers={"Prefer": "count=exact"})
    assert blank.status_code == 200 and blank.headers["X-Total-Count"] == "3", blank.text
    # shown as jsonb writes it, on PostgreSQL-rendered pages and by the Python decoder alike
    import orjson

    from storage.schema import ColumnMeta, ColumnType
    from storage.values import decode_value

    digits = "1" + "0" * 400
    for r in (first, ws.api.get(f"{url}/1")):
        assert r.status_code == 200, r.text
        assert f'"Double":{digits}' in r.text.replace(" ", ""), r.text[:300]
    col = ColumnMeta(id=cols["Double"]["id"], table_id=t["id"], name="Double", type=ColumnType.FORMULA,
                     value_type="number")
    assert orjson.dumps(decode_value(col, 10**400)).decode() == digits
    assert decode_value(col, 2.5) == 2.5 and decode_value(col, 4.0) == 4
