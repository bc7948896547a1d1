"""Bulk-run bookkeeping in PostgreSQL (storage/runs.py, storage/records.write_computed):
a superseded backfill writes nothing more, and a final status is never overwritten."""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest
import pytest_asyncio
from psycopg.rows import dict_row

from storage import ddl, runs
from storage import records as rec
from storage.migrations import migrate
from storage.schema import ColumnMeta, ColumnType, TableMeta

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = [pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set"), pytest.mark.asyncio]

A = ColumnMeta(1, 1, "A", ColumnType.NUMBER)
F = ColumnMeta(2, 1, "F", ColumnType.FORMULA, formula="{A} + 1")


@pytest_asyncio.fixture
async def setup() -> AsyncIterator[tuple[psycopg.AsyncConnection, TableMeta, int]]:
    migrate(DSN)
    ws = random.randint(10**8, 2 * 10**9)
    table = TableMeta(id=1, workspace_id=ws, name="T", icon=None, columns=(A, F))
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True, row_factory=dict_row) as conn:
        cur = await conn.execute("INSERT INTO wds.workspaces (name, plan) VALUES ('bulk-writes', 'pro') RETURNING id")
        meta_ws = (await cur.fetchone())["id"]
        cur = await conn.execute("INSERT INTO wds.tables (workspace_id, name) VALUES (%s, 'T') RETURNING id", (meta_ws,))
        meta_table = (await cur.fetchone())["id"]
        await ddl.create_workspace_schema(conn, ws)
        await ddl.create_table(conn, ws, 1)
        for col in (A, F):
            await ddl.add_column(conn, ws, col)
        await conn.execute(f"INSERT INTO ws_{ws}.t_1 (c_1) SELECT i FROM generate_series(1, 3) i")
        try:
            yield conn, table, meta_table
        finally:
            await ddl.drop_workspace_schema(conn, ws)
            await conn.execute("DELETE FROM wds.runs WHERE table_id = %s", (meta_table,))
            await conn.execute("DELETE FROM wds.tables WHERE id = %s", (meta_table,))
            await conn.execute("DELETE FROM wds.workspaces WHERE id = %s", (meta_ws,))


async def new_run(conn: psycopg.AsyncConnection, table_id: int) -> str:
    run_id = f"run-{uuid.uuid4().hex[:16]}"
    row = await (await conn.execute("SELECT workspace_id FROM wds.tables WHERE id = %s", (table_id,))).fetchone()
    await runs.create_run(conn, run_id=run_id, workspace_id=row["workspace_id"], table_id=table_id, total=3,
                          workflow_id="w", kind="backfill", column_ids=[2])
    return run_id


async def test_a_superseded_backfill_writes_nothing_more(setup) -> None:
    conn, table, table_id = setup
    old, new = await new_run(conn, table_id), await new_run(conn, table_id)
    n, _ = await rec.write_computed(conn, table=table, updates=[(1, {2: 10}, None)], unless_superseded=old)
    assert n == 1
    await runs.supersede(conn, run_id=old, by=new)
    n, _ = await rec.write_computed(conn, table=table, updates=[(1, {2: 99}, None), (2, {2: 99}, None)],
                                    unless_superseded=old)
    assert n == 0
    n, _ = await rec.write_computed(conn, table=table, updates=[(2, {2: 20}, None)], unless_superseded=new)
    assert n == 1
    rows = await rec.get_record_rows(conn, table=table, record_ids=[1, 2])
    assert [r["c_2"] for r in rows] == [10, 20]


async def test_a_final_status_stays_and_progress_only_grows(setup) -> None:
    """Progress only grows, and stops with a final status: a superseded run's chunks still
    in flight write nothing, and their reports made it read "superseded, done 50000/50000"."""
    conn, table, table_id = setup
    run_id = await new_run(conn, table_id)
    await runs.set_progress(conn, run_id=run_id, done=2, failed=0, status=None)
    await runs.set_progress(conn, run_id=run_id, done=1, failed=1, status=None)
    await runs.supersede(conn, run_id=run_id, by="run-next")
    await runs.set_progress(conn, run_id=run_id, done=3, failed=1, status="completed")
    row = await (await conn.execute("SELECT status, done, failed, errors FROM wds.runs WHERE id = %s", (run_id,))).fetchone()
    assert (row["status"], row["done"], row["failed"]) == ("superseded", 2, 1)
    assert row["errors"] == {"superseded_by": "run-next"}
    ws = (await (await conn.execute("SELECT workspace_id FROM wds.tables WHERE id = %s", (table_id,))).fetchone())
    assert await runs.running_backfill(conn, workspace_id=ws["workspace_id"], table_id=table_id) is None
    later = await new_run(conn, table_id)
    assert (await runs.running_backfill(conn, workspace_id=ws["workspace_id"], table_id=table_id))["id"] == later
