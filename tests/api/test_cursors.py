"""Keyset cursors (issue #24): every list page carries ``next``; ``after=<next>`` gives the
page after it. Paging a filtered, sorted table to the end by cursor yields exactly the rows
of one big page, in order — for ascending and descending orders, NULLs first and last,
ties, a single_select ordered by its options, created_at and mixed directions — on REST
(the fast path and FastAPI's route, byte for byte), on MCP, and with PostgreSQL-rendered
and Python-decoded pages. A cursor that does not verify, or belongs to another order,
filter or table, is ``INVALID_CURSOR``; a deep page by cursor reads the (value, id) btree
with no sort and only ``limit + 1`` rows.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from storage import meta
from storage.query import cursor, parse_params, plan_query
from storage.query.render import prepare_list_json
from tests.conftest import ApiProcess, Services, running_api
from tests.mcp.conftest import call_tool_sync, connect, error_code
from tests.storage.test_value_id_index import DSN
from tests.utils.explain import plan_nodes

ORDERS = [
    "Score.asc", "Score.desc", "Score.asc.nullsfirst", "Score.desc.nullslast",
    "Status.asc", "Status.desc", "Due.desc", "Due.asc.nullsfirst", "created_at.desc", "created_at.asc",
    "Status.asc,Score.desc", "Done.desc,Title.asc", "Title.desc", "id.desc", "Score.desc.nullslast,Due.asc",
]
ROWS = 26


@pytest.fixture(scope="module")
def slow_api(services: Services) -> Iterator[ApiProcess]:
    yield from running_api(services, name="api-no-fast-reads-cursors", WDS_FAST_READS="false")


@pytest.fixture
def table(ws: Any) -> dict[str, Any]:
    t = ws.create_table("Tasks", [
        {"name": "Title", "type": "text"},
        {"name": "Score", "type": "number"},
        {"name": "Done", "type": "checkbox"},
        {"name": "Status", "type": "single_select", "options": ["zeta", "alpha", "mid"]},
        {"name": "Due", "type": "date"},
        {"name": "Files", "type": "file"},
    ])
    rows = []
    for i in range(ROWS):
        fields: dict[str, Any] = {"Title": "skip" if i % 9 == 4 else f"t{i % 7}", "Done": i % 3 == 0}
        if i % 4:
            fields["Score"] = float(i % 5) + (0.25 if i % 2 else 0)  # ties, and some NULLs
        if i % 6:
            fields["Status"] = ["zeta", "alpha", "mid"][i % 3]
        if i % 5:
            fields["Due"] = f"2026-02-{i % 4 + 1:02d}T10:00:00.{i:06d}Z"
        rows.append({"fields": fields})
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows})
    assert r.status_code == 200 and all("record" in x for x in r.json()["results"]), r.text
    return t


def _pages(client: httpx.Client, url: str, params: dict[str, str], other: httpx.Client | None = None
           ) -> tuple[list[int], int]:
    """Every record id of a list, page by page through ``next``; the number of pages.
    With ``other``, each page must come out of it with the same bytes."""
    ids: list[int] = []
    after: str | None = None
    pages = 0
    while True:
        q = {**params, **({"after": after} if after else {})}
        r = client.get(url, params=q)
        assert r.status_code == 200, r.text
        if other is not None:
            twin = other.get(url, params=q)
            assert (twin.status_code, twin.content) == (r.status_code, r.content), q
        body = r.json()
        assert set(body) == {"records", "limit", "offset", "next"}
        ids.extend(x["id"] for x in body["records"])
        pages += 1
        assert pages < 100
        after = body["next"]
        if after is None:
            return ids, pages
        assert len(body["records"]) == body["limit"]  # next only on a full page with more after it


@pytest.mark.parametrize("select", [None, "Title,Score,Files"])  # PostgreSQL-rendered, Python-decoded
def test_paging_by_cursor_gives_the_rows_of_one_big_page(ws, table, base_url, slow_api, select):
    url = f"/functions/v1/rest-api/tables/{table['id']}/records"
    headers = {"Authorization": f"Bearer {ws.builder_token}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as fast, \
            httpx.Client(base_url=slow_api.base_url, headers=headers, timeout=30) as slow:
        for order in ORDERS:
            params = {"order": order, "Title": "neq.skip", **({"select": select} if select else {})}
            whole = fast.get(url, params={**params, "limit": "1000"}).json()
            expected = [x["id"] for x in whole["records"]]
            assert whole["next"] is None and len(expected) == ROWS - 3
            for limit in ("1", "4", "23"):
                ids, pages = _pages(fast, url, {**params, "limit": limit}, other=slow)
                assert ids == expected, (order, limit)
                assert pages == -(-len(expected) // int(limit)), (order, limit)  # no empty last page


def test_offset_pages_carry_next_and_views_page_by_cursor(ws, table):
    url = f"/tables/{table['id']}/records"
    whole = [x["id"] for x in ws.api.get(url, params={"order": "Score.desc", "limit": "1000"}).json()["records"]]
    page = ws.api.get(url, params={"order": "Score.desc", "limit": "5", "offset": "7"}).json()
    rest = ws.api.get(url, params={"order": "Score.desc", "limit": "1000", "after": page["next"]}).json()
    assert [x["id"] for x in page["records"] + rest["records"]] == whole[7:]
    view = ws.api.post(f"/tables/{table['id']}/views", json={
        "name": "late", "view_type": "grid",
        "config": {"filters": [{"column": "Title", "op": "neq", "value": "skip"}], "sort": "Due.desc"}})
    assert view.status_code in (200, 201), view.text
    vid = view.json()["id"]
    expected = [x["id"] for x in ws.api.get(url, params={"view": vid, "limit": "1000"}).json()["records"]]
    assert len(expected) == ROWS - 3
    ids, _ = _pages(ws.api, url, {"view": vid, "limit": "3"})
    assert ids == expected
    # a view's cursor continues that view only
    page = ws.api.get(url, params={"view": vid, "limit": "3"}).json()
    r = ws.api.get(url, params={"order": "Due.desc", "limit": "3", "after": page["next"]})
    assert r.status_code == 400 and r.json()["code"] == "INVALID_CURSOR"


def test_invalid_cursors_are_refused(ws, table):
    url = f"/tables/{table['id']}/records"
    first = ws.api.get(url, params={"order": "Score.asc", "Title": "neq.skip", "limit": "3"}).json()
    good = first["next"]
    raw = bytearray(base64.urlsafe_b64decode(good + "=" * (-len(good) % 4)))
    raw[5] ^= 1
    tampered = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    other = ws.create_table("Other", [{"name": "Score", "type": "number"}, {"name": "Title", "type": "text"}])
    cases = [
        (url, {"order": "Score.asc", "Title": "neq.skip", "after": tampered}),
        (url, {"order": "Score.asc", "Title": "neq.skip", "after": "garbage!"}),
        (url, {"order": "Score.asc", "Title": "neq.skip", "after": ""}),
        (url, {"order": "Score.asc", "Title": "neq.skip", "after": "A" * 9000}),
        (url, {"order": "Score.desc", "Title": "neq.skip", "after": good}),  # another order
        (url, {"Title": "neq.skip", "after": good}),  # the default order
        (url, {"order": "Score.asc", "Title": "neq.x", "after": good}),  # another filter
        (url, {"order": "Score.asc", "after": good}),  # no filter
        (url, {"order": "Score.asc", "Title": "neq.skip", "after": good, "offset": "0"}),
        (url, {"order": "Score.asc", "Title": "neq.skip", "after": good, "offset": "3"}),
        (f"/tables/{other['id']}/records", {"order": "Score.asc", "Title": "neq.skip", "after": good}),
    ]
    for u, params in cases:
        r = ws.api.get(u, params=params)
        assert r.status_code == 400 and r.json()["code"] == "INVALID_CURSOR", (params, r.text)
    ok = ws.api.get(url, params={"order": "Score.asc", "Title": "neq.skip", "limit": "3", "after": good})
    assert ok.status_code == 200 and ok.json()["records"]


def test_a_cursor_continues_the_same_order_however_it_is_written(ws, table):
    """``Score.asc`` is ``Score.asc.nullslast`` and ``Score.asc,id.asc`` (PostgreSQL's
    default NULL placement, and the id the order ends with anyway): a cursor made under
    one spelling continues the others; a different NULL placement is another order."""
    url = f"/tables/{table['id']}/records"
    whole = [x["id"] for x in ws.api.get(url, params={"order": "Score.asc", "limit": "1000"}).json()["records"]]
    first = ws.api.get(url, params={"order": "Score.asc", "limit": "4"}).json()
    for same in ("Score.asc.nullslast", "Score.asc,id.asc", "Score.nullslast", "Score"):
        r = ws.api.get(url, params={"order": same, "limit": "4", "after": first["next"]})
        assert r.status_code == 200, (same, r.text)
        assert [x["id"] for x in r.json()["records"]] == whole[4:8], same
    down = ws.api.get(url, params={"order": "Score.desc", "limit": "4"}).json()
    r = ws.api.get(url, params={"order": "Score.desc.nullsfirst", "limit": "4", "after": down["next"]})
    assert r.status_code == 200, r.text
    for other in ("Score.asc.nullsfirst", "Score.asc,id.desc", "Score.desc"):
        r = ws.api.get(url, params={"order": other, "limit": "4", "after": first["next"]})
        assert r.status_code == 400 and r.json()["code"] == "INVALID_CURSOR", (other, r.text)


def test_mcp_list_records_pages_by_cursor(ws, table, base_url):
    args = {"table_id": table["id"], "filters": {"Title": "neq.skip"}}
    for order in ("Score.desc.nullslast", "Status.asc,Score.desc", "created_at.asc"):
        whole = call_tool_sync(base_url, ws.builder_token, "list_records", {**args, "order": order, "limit": 1000})
        expected = [x["id"] for x in whole["records"]]
        assert whole["next"] is None and whole["has_more"] is False
        ids: list[int] = []
        after = None
        while True:
            page = call_tool_sync(base_url, ws.builder_token, "list_records",
                                  {**args, "order": order, "limit": 5, **({"after": after} if after else {})})
            ids.extend(x["id"] for x in page["records"])
            after = page["next"]
            assert page["has_more"] is (after is not None)
            if after is None:
                break
            assert "after=" in page["hint"]
            # offset only on an offset page: a cursor page's position is not known
            assert ("offset=" in page["hint"]) is (len(ids) == len(page["records"])), page["hint"]
        assert ids == expected, order
    first = call_tool_sync(base_url, ws.builder_token, "list_records", {**args, "order": "Score.asc", "limit": 2})

    async def call(a: dict[str, Any]) -> str:
        async with connect(base_url, ws.builder_token) as c:
            return error_code(await c.call_tool("list_records", a))

    for bad, code in (({**args, "order": "Score.desc", "after": first["next"]}, "INVALID_CURSOR"),
                      ({**args, "order": "Score.asc", "after": first["next"], "offset": 2}, "INVALID_CURSOR"),
                      ({**args, "order": "Score.asc", "after": first["next"][:-3]}, "INVALID_CURSOR"),
                      ({**args, "order": "Score.asc", "after": 12}, "VALIDATION_ERROR")):  # the input schema
        assert asyncio.run(call(bad)) == code, bad


ROWS_BIG = 30_000


@pytest.mark.asyncio
async def test_a_deep_cursor_page_reads_the_index_without_sorting(ws, services):
    t = ws.create_table("Big", [{"name": "Score", "type": "number"}])
    score = t["columns"][0]
    phys = (sql.Identifier(f"ws_{ws.id}"), sql.Identifier(f"t_{t['id']}"))
    async with await psycopg.AsyncConnection.connect(DSN, row_factory=dict_row, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("INSERT INTO {}.{} ({}) SELECT (i %% 300)::float8 FROM generate_series(1, %s) AS i").format(
                *phys, sql.Identifier(f"c_{score['id']}")), (ROWS_BIG,))
        await conn.execute(sql.SQL("ANALYZE {}.{}").format(*phys))
        cursor.set_key(services.secret_key)  # as the API process signs
        for order in ("Score.desc", "Score.asc", "id.asc", "id.desc"):
            # a cursor 10,000 rows deep, from a page the API served
            deep = ws.api.get(f"/tables/{t['id']}/records",
                              params={"order": order, "limit": "1000", "offset": "9000", "select": ""}).json()
            assert deep["next"]
            schema = await meta.load_schema(conn, workspace_id=ws.id)
            params = [("order", order), ("limit", "20"), ("after", deep["next"])]
            plan = plan_query(parse_params(params), schema.tables[t["id"]], can_read=lambda _: True,
                              get_table=schema.tables.get)
            prepared = prepare_list_json(plan)  # the statement the API sends for this page
            query = psycopg.AsyncClientCursor(conn).mogrify(prepared.page_sql, prepared.page_params)
            row = await (await conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query)).fetchone()
            assert row is not None
            nodes = plan_nodes(row["QUERY PLAN"][0]["Plan"])
            types = [n["Node Type"] for n in nodes]
            scans = [n for n in nodes if n["Node Type"] in ("Index Scan", "Index Only Scan")]
            assert all(n.get("Rows Removed by Filter", 0) == 0 for n in scans), (order, [(n.get("Index Name"), n.get("Index Cond"), n.get("Filter")) for n in scans])
            assert all(n["Node Type"] != "Seq Scan" for n in nodes), (order, types)
            if order == "Score.asc":
                # NULLs sort last: the values after the cursor's and then the NULLs, each a
                # bounded range scan of the btree; only their limit + 1 rows each are sorted
                assert len(scans) == 2 and all(n["Actual Rows"] <= 21 for n in scans), (order, scans)
                assert all(n["Actual Rows"] <= 42 for n in nodes if "Sort" in n["Node Type"]), (order, types)
            else:
                # one range scan of the btree from the cursor on, no sort: limit + 1 rows read
                assert not any("Sort" in n for n in types), (order, types)
                assert len(scans) == 1 and scans[0]["Actual Rows"] == 21, (order, scans)


@pytest.mark.parametrize("select", [None, "N,F,R,Files"])  # PostgreSQL-rendered, Python-decoded
def test_paging_by_cursor_on_fractional_formulas_and_empty_relations(ws, select):
    """Two cursors that broke: a formula's fraction (``{N} / 3``) bound as a float and
    cast to numeric came back with 15 digits, so on the Python-decoded pages (a file
    column) the next page started at the cursor row again, for ever; and a cursor ending
    on a row whose relation is empty was refused (``INVALID_CURSOR``)."""
    other = ws.create_table("Others", [{"name": "Name", "type": "text"}])
    made = ws.api.post(f"/tables/{other['id']}/records/batch",
                       json={"rows": [{"fields": {"Name": f"o{i}"}} for i in range(3)]}).json()["results"]
    others = [x["record"]["id"] for x in made]
    t = ws.create_table("Thirds", [{"name": "N", "type": "number"},
                                   {"name": "F", "type": "formula", "formula": "{N} / 3"},
                                   {"name": "R", "type": "relation", "relation_table_id": other["id"]},
                                   {"name": "Files", "type": "file"}])
    rows = [{"fields": {"N": i % 4 + (0.1 if i % 5 == 0 else 0), **({"R": others[i % 3]} if i % 4 else {})}}
            for i in range(30)]
    assert ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows}).status_code == 200
    url = f"/tables/{t['id']}/records"
    for order in ("F.desc", "F.asc", "R.desc", "R.asc", "R.asc.nullsfirst", "N.asc,R.desc", "F.desc,R.asc"):
        params = {"order": order, **({"select": select} if select else {})}
        whole = ws.api.get(url, params={**params, "limit": "1000"}).json()
        expected = [x["id"] for x in whole["records"]]
        assert len(expected) == 30
        for limit in ("1", "7"):
            ids, _ = _pages(ws.api, url, {**params, "limit": limit})
            assert ids == expected, (order, limit)


def test_a_cursor_page_counts_the_total_but_claims_no_range(ws, table):
    """``Content-Range`` of a page asked with ``after`` says ``*/<total>``: the page's
    position is not counted (it said ``0-4/<total>``, the first page's range)."""
    url, params = f"/tables/{table['id']}/records", {"order": "Score.asc", "limit": "5", "Title": "neq.skip"}
    count = {"Prefer": "count=exact"}
    first = ws.api.get(url, params=params, headers=count)
    assert first.headers["Content-Range"] == f"0-4/{ROWS - 3}", first.headers
    second = ws.api.get(url, params={**params, "after": first.json()["next"]}, headers=count)
    assert second.status_code == 200 and len(second.json()["records"]) == 5
    assert second.headers["Content-Range"] == f"*/{ROWS - 3}" and second.headers["X-Total-Count"] == str(ROWS - 3)
    by_offset = ws.api.get(url, params={**params, "offset": "5"}, headers=count)
    assert by_offset.headers["Content-Range"] == f"5-9/{ROWS - 3}"
    assert [x["id"] for x in by_offset.json()["records"]] == [x["id"] for x in second.json()["records"]]
