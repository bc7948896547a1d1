"""Statements on a user table survive a change of its columns (issue #21).

psycopg prepares a statement on a connection after ``prepare_threshold`` (5) executions
of the same text, and PostgreSQL then refuses the prepared statement once its result
shape changed ("cached plan must not change result type"). Each case runs the statement
more than five times on one connection, changes the table on ANOTHER connection (as a
column created through the API does), and runs it again on the first with the new schema.
"""

from __future__ import annotations

import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
import pytest
import pytest_asyncio
from psycopg import sql
from psycopg.rows import dict_row

from storage import ddl
from storage import records as rec
from storage.db import Database
from storage.reads import RecordReader
from storage.schema import ColumnMeta, ColumnType, TableMeta

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = [pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set"), pytest.mark.asyncio]

A = ColumnMeta(1, 1, "A", ColumnType.NUMBER)
F = ColumnMeta(2, 1, "F", ColumnType.FORMULA, formula="{A} + 1")
G = ColumnMeta(3, 1, "G", ColumnType.FORMULA, formula="{A} * 2")


def meta(ws: int, *cols: ColumnMeta) -> TableMeta:
    return TableMeta(id=1, workspace_id=ws, name="T", icon=None, columns=tuple(cols))


@pytest_asyncio.fixture
async def ws() -> AsyncIterator[int]:
    ws = random.randint(10**8, 2 * 10**9)
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as c:
        await ddl.create_workspace_schema(c, ws)
        await ddl.create_table(c, ws, 1)
        for col in (A, F):
            await ddl.add_column(c, ws, col)
        await c.execute(sql.SQL("INSERT INTO {} (c_1) SELECT i FROM generate_series(1, 20) i").format(
            ddl.qualified(ws, 1)))
    try:
        yield ws
    finally:
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as c:
            await ddl.drop_workspace_schema(c, ws)


async def add_column(ws: int, col: ColumnMeta) -> None:
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as other:
        await ddl.add_column(other, ws, col)


Call = Callable[[psycopg.AsyncConnection[Any], TableMeta], Awaitable[Any]]

STATEMENTS: dict[str, Call] = {
    "get_record_rows": lambda c, t: rec.get_record_rows(c, table=t, record_ids=[1, 2, 3]),
    "get_record_row": lambda c, t: rec.get_record_row(c, table=t, record_id=1),
    "update_record": lambda c, t: rec.update_record(c, table=t, record_id=1, row=rec.PreparedRow({1: 5.0})),
    "insert_record": lambda c, t: rec.insert_record(c, table=t, row=rec.PreparedRow({1: 7.0})),
    "write_computed": lambda c, t: rec.write_computed(
        c, table=t, updates=[(2, {2: 3}, {"status": "ok"})], returning=True),
}


@pytest.mark.parametrize("name", sorted(STATEMENTS))
async def test_a_statement_prepared_before_a_column_is_added_still_runs(ws: int, name: str) -> None:
    call = STATEMENTS[name]
    before, after = meta(ws, A, F), meta(ws, A, F, G)
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True, row_factory=dict_row) as conn:
        for _ in range(8):  # past psycopg's prepare_threshold: the statement is now prepared
            await call(conn, before)
        await add_column(ws, G)
        out = await call(conn, after)
        rows = out[1] if name == "write_computed" else out if isinstance(out, list) else [out]
        assert rows and all("c_3" in r for r in rows), rows
        # a run with the schema it started with (a snapshot from before) still reads
        await call(conn, before)


async def test_the_coalescing_reader_reads_new_columns(ws: int) -> None:
    db = Database(DSN, min_size=1, max_size=1)  # one connection: every read prepares on it
    await db.open()
    try:
        reader = RecordReader(db)
        for _ in range(8):
            assert (await reader.get(meta(ws, A, F), 1))["c_1"] == 1
        await add_column(ws, G)
        row = await reader.get(meta(ws, A, F, G), 1)
        assert row is not None and "c_3" in row
    finally:
        await db.close()
