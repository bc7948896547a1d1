"""Every query has a deadline (issue #22, item 4). Before: no statement timeout outside
``/sql``; 24 parallel ``order=Title.desc&offset=10000000`` on 50k rows from one token took
the pool (4 x 503, another workspace's GET up to 10 s, /healthz 503 x 14). Now every
pooled connection has a ``statement_timeout`` (503 ``QUERY_TIMEOUT`` naming it), one
workspace holds at most a few of the pool's connections, and deep offsets under a sort are
refused before they run (400 ``OFFSET_TOO_DEEP``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import psycopg
import pytest
from psycopg import sql

from storage.db import Database, current_workspace
from storage.ddl import qualified
from storage.errors import QueryTimeout, Unavailable
from storage.schema import column_name
from tests.conftest import ApiProcess, running_api


def test_a_statement_past_its_deadline_answers_query_timeout_and_the_connection_survives(services):
    async def run() -> None:
        db = Database(services.pg.dsn, min_size=1, max_size=2, statement_timeout_ms=100)
        await db.open()
        try:
            with pytest.raises(QueryTimeout) as info:
                await db.fetch("SELECT pg_sleep(2)")
            assert info.value.status == 503 and info.value.code == "QUERY_TIMEOUT"
            assert "0.1 s statement timeout" in info.value.message
            assert (await db.fetchrow("SELECT 1 AS one")) == {"one": 1}
        finally:
            await db.close()

    asyncio.run(run())


def test_one_workspace_cannot_take_every_connection_of_the_pool(services):
    async def run() -> None:
        db = Database(services.pg.dsn, min_size=1, max_size=4, timeout_s=1.0, per_workspace=2,
                      statement_timeout_ms=10_000)
        await db.open()

        async def as_workspace(ws: int, query: str) -> object:
            current_workspace.set(ws)  # this task's context only, as a request's
            return await db.fetchrow(query)

        hogs = [asyncio.create_task(as_workspace(1, "SELECT pg_sleep(5) AS hog")) for _ in range(6)]
        try:
            async with asyncio.timeout(20), await psycopg.AsyncConnection.connect(services.pg.dsn, autocommit=True) as watch:
                while True:  # until the hogs' sleeps run (bounded by the timeout above)
                    cur = await watch.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(5)%'")
                    row = await cur.fetchone()
                    if row and row[0] >= 2:
                        break
                    assert not all(h.done() for h in hogs), [h.exception() for h in hogs]
                    await asyncio.sleep(0.02)
            # another workspace still gets a connection (before: the pool's 1 s wait, then 503)
            assert await as_workspace(2, "SELECT 1 AS one") == {"one": 1}
            results = await asyncio.gather(*hogs, return_exceptions=True)
        finally:
            for h in hogs:
                h.cancel()
            await db.close()
        busy = [r for r in results if isinstance(r, Unavailable)]
        assert busy and all(r.code == "WORKSPACE_BUSY" for r in busy)
        assert sum(r == {"hog": ""} for r in results) >= 2

    asyncio.run(run())


def _table_with_rows(ws, services, n: int) -> dict:
    t = ws.create_table("Big", [{"name": "Title", "type": "text"}])
    col = t["columns"][0]["id"]
    with psycopg.connect(services.pg.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("INSERT INTO {} ({}) SELECT md5(i::text) FROM generate_series(1, %s) i").format(
            qualified(ws.id, t["id"]), sql.Identifier(column_name(col))), (n,))
        conn.execute(sql.SQL("ANALYZE {}").format(qualified(ws.id, t["id"])))
    return t


def test_a_deep_offset_under_a_sort_is_refused_before_it_runs(ws, services):
    t = _table_with_rows(ws, services, 20_000)
    base = f"/tables/{t['id']}/records"
    r = ws.api.get(base, params={"order": "Title.desc", "offset": 10_000_000})
    assert r.status_code == 400 and r.json()["code"] == "OFFSET_TOO_DEEP", r.text
    assert "page by cursor" in r.json()["error"] and "after=" in r.json()["error"]
    # by id (the primary key) a deep offset stays allowed, and so does a shallow one under a sort
    assert ws.api.get(base, params={"order": "id.desc", "offset": 15_000, "limit": 5}).status_code == 200
    r = ws.api.get(base, params={"order": "Title.desc", "offset": 10_000, "limit": 1})
    assert r.status_code == 200 and len(r.json()["records"]) == 1
    # the same rule through the MCP tools' and views' planner: keyset paging works
    last = r.json()["records"][0]["fields"]["Title"]
    r = ws.api.get(base, params={"order": "Title.desc", "Title": f"lt.{last}", "limit": 1})
    assert r.status_code == 200 and r.json()["records"][0]["fields"]["Title"] < last
    # and the page's next cursor goes on past the offset limit
    deep = ws.api.get(base, params={"order": "Title.desc", "offset": 10_000, "limit": 1}).json()
    r = ws.api.get(base, params={"order": "Title.desc", "after": deep["next"], "limit": 1})
    assert r.status_code == 200 and r.json()["records"][0]["fields"]["Title"] <= last


@pytest.fixture(scope="module")
def strict_api(services) -> Iterator[ApiProcess]:
    """An API whose statements may run 100 ms."""
    yield from running_api(services, name="api-deadline", WDS_STATEMENT_TIMEOUT_MS="100")


def test_a_slow_list_answers_query_timeout_naming_the_limit(make_workspace, services, strict_api):
    ws = make_workspace()
    t = _table_with_rows(ws, services, 600_000)
    with httpx.Client(base_url=f"{strict_api.base_url}/functions/v1/rest-api",
                      headers={"Authorization": f"Bearer {ws.builder_token}"}, timeout=60) as api:
        # counting matches of patterns no trigram narrows (one-character pieces): every row
        # is read and matched four times (a search no row matches, by contrast, can be
        # answered from the trigram index at once, whichever plan the page gets)
        r = api.get(f"/tables/{t['id']}/records", headers={"Prefer": "count=exact"}, params={
            "Title": "ilike.*0*", "or": "(Title.ilike.*1*1*1*,Title.ilike.*2*2*2*,Title.ilike.*3*3*3*)", "limit": 1})
        assert r.status_code == 503 and r.json()["code"] == "QUERY_TIMEOUT", r.text
        assert "0.1 s statement timeout" in r.json()["error"]
        assert api.get(f"/tables/{t['id']}/records", params={"limit": 1}).status_code == 200


def test_a_schema_change_of_a_large_table_runs_under_the_ddl_deadline(make_workspace, services, strict_api):
    """A type change reads and rewrites every row (~26 s for a million): it runs under the
    schema change's own deadline (storage.ddl.DDL_TIMEOUT_MS), not the per-statement one.
    Before: a retype of a million rows answered 503 QUERY_TIMEOUT after 5 s and could not
    be done at all; here the API's statements may run 100 ms and the table is large enough
    that the conversion takes longer."""
    ws = make_workspace()
    t = ws.create_table("Numbers", [{"name": "N", "type": "text"}, {"name": "Keep", "type": "text"}])
    col, keep = t["columns"][0]["id"], t["columns"][1]["id"]
    with psycopg.connect(services.pg.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("INSERT INTO {} ({}, {}) SELECT i::text || '.5', 'k' || i FROM generate_series(1, 300000) i")
                     .format(qualified(ws.id, t["id"]), sql.Identifier(column_name(col)), sql.Identifier(column_name(keep))))
    with httpx.Client(base_url=f"{strict_api.base_url}/functions/v1/rest-api",
                      headers={"Authorization": f"Bearer {ws.builder_token}"}, timeout=120) as api:
        r = api.patch(f"/tables/{t['id']}/columns/{col}", json={"type": "number"})
        assert r.status_code == 200, r.text
        assert r.json()["type"] == "number"
    # read back through the usual API: the 100 ms one is there for the schema change, and
    # the first read of a freshly rewritten table may pass 100 ms on a loaded machine
    r = ws.api.get(f"/tables/{t['id']}/records", params={"order": "id.asc", "limit": 2})
    assert r.status_code == 200, r.text
    got = r.json()["records"]
    assert [g["fields"]["N"] for g in got] == [1.5, 2.5]
    assert [g["fields"]["Keep"] for g in got] == ["k1", "k2"]
    with psycopg.connect(services.pg.dsn, autocommit=True) as conn:
        row = conn.execute(sql.SQL("SELECT count(*), sum({}) FROM {}").format(
            sql.Identifier(column_name(col)), qualified(ws.id, t["id"]))).fetchone()
    assert row == (300_000, sum(i + 0.5 for i in range(1, 300_001)))  # every value converted, none lost


def test_a_schema_change_waits_for_a_long_one_of_its_workspace(make_workspace, services, strict_api):
    """Schema changes of one workspace run one at a time (an advisory lock). Waiting for a
    long one is under the schema change's deadline too, not the per-statement one: a
    rename sent while a large type change runs waits for it and succeeds."""
    ws = make_workspace()
    t = ws.create_table("Numbers", [{"name": "N", "type": "text"}, {"name": "Other", "type": "text"}])
    col, other = t["columns"][0]["id"], t["columns"][1]["id"]
    with psycopg.connect(services.pg.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("INSERT INTO {} ({}) SELECT i::text FROM generate_series(1, 300000) i")
                     .format(qualified(ws.id, t["id"]), sql.Identifier(column_name(col))))

    async def run() -> tuple[httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(base_url=f"{strict_api.base_url}/functions/v1/rest-api",
                                     headers={"Authorization": f"Bearer {ws.builder_token}"}, timeout=120) as api:
            retype = asyncio.create_task(api.patch(f"/tables/{t['id']}/columns/{col}", json={"type": "number"}))
            async with asyncio.timeout(60), await psycopg.AsyncConnection.connect(services.pg.dsn, autocommit=True) as watch:
                while True:  # until the type change holds the workspace's schema lock
                    cur = await watch.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                                              " AND objid = %s AND granted", (ws.id,))
                    if (await cur.fetchone())[0]:  # type: ignore[index]
                        break
                    assert not retype.done(), retype.result().text
                    await asyncio.sleep(0.005)
            rename = await api.patch(f"/tables/{t['id']}/columns/{other}", json={"name": "Renamed"})
            return await retype, rename

    retype, rename = asyncio.run(run())
    assert retype.status_code == 200, retype.text
    assert rename.status_code == 200, rename.text
    assert rename.json()["name"] == "Renamed"
