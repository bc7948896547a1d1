"""A data text column's btree is ``(left(value, 200), id)`` (storage/ddl.py
``text_key_expr``): any text fits in it, and sorted, range-filtered, equality and
cursor-continued pages still read it — sorted pages in order, with at most an
Incremental Sort of the rows sharing a prefix, never a full Sort or a Seq Scan.

Rows are written straight into the physical table; the table and its column are made
through the API, so the DDL under test is the one the service runs.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from storage import meta
from storage.query import cursor, parse_params, plan_query
from tests.utils.explain import explain_list, plan_nodes

ROWS = 30_000
DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")
LONG = "repeat(md5(i::text), 150)"  # 4,800 characters, over a btree entry's ~2.7 kB uncompressed


@pytest.fixture
def big(ws):
    t = ws.create_table("Names", [{"name": "Name", "type": "text"}])
    name = t["columns"][0]
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL("INSERT INTO {}.{} ({}) SELECT CASE WHEN i %% 50 = 0 THEN NULL"
                    " WHEN i %% 7 = 0 THEN " + LONG + " ELSE md5(i::text) END"
                    " FROM generate_series(1, %s) AS i").format(
                sql.Identifier(f"ws_{ws.id}"), sql.Identifier(f"t_{t['id']}"), sql.Identifier(f"c_{name['id']}")),
            (ROWS,),
        )
        conn.execute(sql.SQL("ANALYZE {}.{}").format(sql.Identifier(f"ws_{ws.id}"), sql.Identifier(f"t_{t['id']}")))
    return ws, t, name


def _index(t: dict[str, Any], col: dict[str, Any]) -> str:
    return f"t_{t['id']}_c_{col['id']}"


def _used(nodes: list[dict[str, Any]]) -> list[str | None]:
    return [n.get("Index Name") for n in nodes if "Index" in n["Node Type"]]


def _value(i: int) -> str:
    with psycopg.connect(DSN) as conn:
        return conn.execute("SELECT repeat(md5(%s::text), 150)", (str(i),)).fetchone()[0]


async def _cursor(ws_id: int, table_id: int, params: list[tuple[str, str]], keys: list[Any]) -> str:
    async with await psycopg.AsyncConnection.connect(DSN, row_factory=dict_row) as conn:
        schema = await meta.load_schema(conn, workspace_id=ws_id)
    plan = plan_query(parse_params(params), schema.tables[table_id], can_read=lambda _: True,
                      get_table=schema.tables.get)
    assert plan.cursor_kinds is not None
    return cursor.encode(plan.fingerprint, plan.cursor_kinds, keys)


def _tree(node: dict[str, Any], depth: int = 0) -> str:
    return "\n" + "  " * depth + node["Node Type"] + "".join(_tree(c, depth + 1) for c in node.get("Plans", []))


def _ids(ws, t, params):
    r = ws.api.get(f"/tables/{t['id']}/records", params=[*params, ("select", "")])
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.asyncio
async def test_pages_read_the_prefix_index(big):
    ws, t, name = big
    long = _value(14)
    # sorted and range-filtered pages: in index order, no full Sort
    for params in ([("order", "Name.asc")], [("order", "Name.desc")],
                   [("Name", "gte.c"), ("order", "Name.asc")], [("Name", "lt.4"), ("order", "Name.desc")],
                   [("Name", f"gte.{long}"), ("order", "Name.asc")]):
        nodes = await explain_list(DSN, ws.id, t["id"], params + [("limit", "20")])
        types = [n["Node Type"] for n in nodes]
        assert "Sort" not in types and "Seq Scan" not in types, (params, types)
        assert set(_used(nodes)) == {_index(t, name)}, (params, types)
    # equality and in (long values too) read the index
    for params in ([("Name", f"eq.{long}")], [("Name", f"in.({long},{_value(21)},x)")]):
        nodes = await explain_list(DSN, ws.id, t["id"], params + [("limit", "20")])
        types = [n["Node Type"] for n in nodes]
        assert "Seq Scan" not in types and _index(t, name) in _used(nodes), (params, types)
    assert len(_ids(ws, t, [("Name", f"eq.{long}")])["records"]) == 1
    assert len(_ids(ws, t, [("Name", f"in.({long},{_value(21)},x)")])["records"]) == 2


@pytest.mark.asyncio
async def test_cursor_pages_read_the_prefix_index(big):
    ws, t, name = big
    long = _value(14)
    for direction, op in (("asc", "gte"), ("desc", "lte")):
        # a page ending on a short value, and one ending on a long value (its cursor
        # carries the text's head and digest: the row's text is read back by id)
        for params, size in (([("order", f"Name.{direction}")], 20),
                             ([("order", f"Name.{direction}"), ("Name", f"{op}.{long}")], 1)):
            page = _ids(ws, t, params + [("limit", str(size))])
            assert page["next"], page
            last = ws.api.get(f"/tables/{t['id']}/records/{page['records'][-1]['id']}").json()
            # the API's cursor is signed with its key: sign the same position here
            after = await _cursor(ws.id, t["id"], params, [last["fields"]["Name"], last["id"]])
            nodes = await explain_list(DSN, ws.id, t["id"], params + [("limit", str(size)), ("after", after)])
            types = [n["Node Type"] for n in nodes]
            assert "Seq Scan" not in types and _index(t, name) in _used(nodes), (params, types)
            # a full Sort only of the UNION ALL of two bounded index reads (the values
            # after the cursor, then the NULLs: storage/query/build.py page_source)
            for node in nodes:
                if node["Node Type"] == "Sort":
                    append = [n for n in plan_nodes(node) if n["Node Type"] == "Append"]
                    assert append, _tree(node)
                    assert all(c["Plans"][0]["Node Type"] == "Limit" for c in append[0]["Plans"]), _tree(node)
            after = _ids(ws, t, params + [("limit", str(size)), ("after", page["next"])])["records"]
            both = _ids(ws, t, params + [("limit", str(2 * size))])["records"]
            assert [x["id"] for x in page["records"] + after] == [x["id"] for x in both]
