"""Coalesced reads by id (storage/reads.py) against a real PostgreSQL: the same rows as one
query per read, fewer queries under concurrency, and no read answered from a query that
started before it was asked."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
import pytest_asyncio
from psycopg import sql

from storage import ddl
from storage.db import Database
from storage.errors import Unavailable
from storage.reads import Embedding, RecordReader, joined_record, joined_steps
from storage.records import row_to_record
from storage.schema import ColumnMeta, ColumnType, TableMeta

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = [pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set"), pytest.mark.asyncio]


class CountingReader(RecordReader):
    """Counts the statements it sends (the reading itself is the real one)."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.queries: list[list[int]] = []

    async def _fetch(self, key: tuple[int, int], ids: list[int]) -> list[dict[str, Any]]:
        self.queries.append(list(ids))
        return await super()._fetch(key, ids)


@pytest_asyncio.fixture
async def setup() -> AsyncIterator[tuple[Database, TableMeta]]:
    ws = random.randint(10**8, 2 * 10**9)
    table = TableMeta(id=1, workspace_id=ws, name="T", icon=None,
                      columns=(ColumnMeta(1, 1, "Name", ColumnType.TEXT),))
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as c:
        await ddl.create_workspace_schema(c, ws)
        await ddl.create_table(c, ws, 1)
        await ddl.add_column(c, ws, table.columns[0])
        await c.execute(sql.SQL("INSERT INTO {} (c_1) SELECT 'n' || i FROM generate_series(1, 200) i").format(
            ddl.qualified(ws, 1)))
    db = Database(DSN, min_size=1, max_size=8)
    await db.open()
    try:
        yield db, table
    finally:
        await db.close()
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as c:
            await ddl.drop_workspace_schema(c, ws)


async def test_concurrent_reads_get_their_own_rows_in_fewer_queries(setup: tuple[Database, TableMeta]) -> None:
    db, table = setup
    reader = CountingReader(db)
    ids = [random.randint(1, 260) for _ in range(300)]  # ids above 200 do not exist
    got = await asyncio.gather(*(reader.get(table, rid) for rid in ids))
    for rid, row in zip(ids, got):
        if rid > 200:
            assert row is None
        else:
            assert row is not None and row["id"] == rid and row["c_1"] == f"n{rid}"
    assert sum(len(q) for q in reader.queries) <= len(ids)
    assert len(reader.queries) < len(ids) // 10, reader.queries  # coalesced
    assert reader.queries[0] == [ids[0]]  # the first read went at once, alone
    # idle again: a lone read is one query of its own
    before = len(reader.queries)
    assert (await reader.get(table, 7))["c_1"] == "n7"  # type: ignore[index]
    assert reader.queries[before:] == [[7]]


async def test_a_waiting_read_sees_writes_committed_before_it_was_asked(setup: tuple[Database, TableMeta]) -> None:
    db, table = setup
    reader = CountingReader(db)
    target = ddl.qualified(table.workspace_id, table.id)
    async with db.connection() as conn:
        # hold the first read in flight: it waits on a row lock taken by another session
        lock = await psycopg.AsyncConnection.connect(DSN)
        await lock.execute(sql.SQL("SELECT 1 FROM {} WHERE id = 1 FOR UPDATE").format(target))
        reader._meta[(table.workspace_id, table.id)] = table
        reader._statements((table.workspace_id, table.id))  # compose once
        one, many = reader._sql[(table.workspace_id, table.id)]
        reader._sql[(table.workspace_id, table.id)] = (one.replace("WHERE id = %s", "WHERE id = %s FOR SHARE"), many)
        first = asyncio.create_task(reader.get(table, 1))
        await asyncio.sleep(0.2)
        await conn.execute(sql.SQL("UPDATE {} SET c_1 = 'changed' WHERE id = 2").format(target))
        second = asyncio.create_task(reader.get(table, 2))  # arrives after the write committed
        await asyncio.sleep(0.1)
        assert not first.done() and not second.done()
        await lock.rollback()
        await lock.close()
        assert (await first)["c_1"] == "n1"  # type: ignore[index]
        assert (await second)["c_1"] == "changed"  # type: ignore[index]
    assert reader.queries == [[1], [2]]


async def test_a_caller_that_leaves_does_not_disturb_the_others(setup: tuple[Database, TableMeta]) -> None:
    db, table = setup
    reader = RecordReader(db)
    tasks = [asyncio.create_task(reader.get(table, rid)) for rid in range(1, 21)]
    await asyncio.sleep(0)
    tasks[5].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[5], asyncio.CancelledError)
    assert [r["id"] for i, r in enumerate(done) if i != 5] == [i for i in range(1, 21) if i != 6]  # type: ignore[index]
    assert reader._tables == {}  # idle


async def test_every_waiter_gets_the_error(setup: tuple[Database, TableMeta]) -> None:
    db, table = setup
    reader = RecordReader(db)
    gone = TableMeta(id=999, workspace_id=table.workspace_id, name="gone", icon=None, columns=())
    results = await asyncio.gather(*(reader.get(gone, rid) for rid in range(1, 6)), return_exceptions=True)
    assert all(isinstance(r, psycopg.errors.UndefinedTable) for r in results), results
    await db.close()
    with pytest.raises(Unavailable):
        await reader.get(table, 1)


async def test_joined_reads_embed_the_related_rows_in_one_coalesced_statement(
        setup: tuple[Database, TableMeta]) -> None:
    """``get_joined``: the same row ``get`` reads and, per embed, the related row its cell
    names (all null for an empty cell), read by one statement per batch of concurrent
    reads; ``joined_record`` shapes it as ``row_to_record`` shapes each row."""
    db, people = setup
    ws = people.workspace_id
    ref = ColumnMeta(3, 2, "Ref", ColumnType.RELATION, relation_table_id=people.id)
    title = ColumnMeta(2, 2, "Title", ColumnType.TEXT)
    items = TableMeta(id=2, workspace_id=ws, name="Items", icon=None, columns=(title, ref))
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as c:
        await ddl.create_table(c, ws, 2)
        for col in items.columns:
            await ddl.add_column(c, ws, col)
        # item i names person i; every 5th names nobody
        await c.execute(sql.SQL(
            "INSERT INTO {} (c_2, c_3) SELECT 't' || i, CASE WHEN i % 5 = 0 THEN NULL ELSE i END "
            "FROM generate_series(1, 100) i").format(ddl.qualified(ws, 2)))
        await c.execute(sql.SQL("UPDATE {} SET c_3 = 150 WHERE id = 7").format(ddl.qualified(ws, 2)))
        await c.execute(sql.SQL("DELETE FROM {} WHERE id = 150").format(ddl.qualified(ws, 1)))
    reader = CountingReader(db)
    embeds = (Embedding(ref, people, people.columns),)
    steps = joined_steps((title,), embeds, (ref, title))  # the embed first: output order
    ids = [random.randint(1, 110) for _ in range(200)]  # ids above 100 do not exist
    got = await asyncio.gather(*(reader.get_joined(items, rid, embeds) for rid in ids))
    plain = RecordReader(db)
    for rid, row in zip(ids, got):
        if rid > 100:
            assert row is None
            continue
        assert row is not None
        alone = await plain.get(items, rid)
        assert alone is not None
        record = joined_record(steps, row)
        expected = row_to_record(items, alone, (title,))
        if rid % 5 == 0 or rid == 7:  # an empty cell (7: its person was deleted, the key cleared it)
            assert alone["c_3"] is None
            expected["fields"] = {"Ref": None, "Title": f"t{rid}"}
        else:
            person = await plain.get(people, rid)
            assert person is not None
            expected["fields"] = {"Ref": row_to_record(people, person), "Title": f"t{rid}"}
        assert record == expected
        assert list(record["fields"]) == ["Ref", "Title"]
    assert len(reader.queries) < len(ids) // 10, reader.queries  # coalesced
    # only the embed's fields are read of the related table
    only = (Embedding(ref, people, ()),)
    record = joined_record(joined_steps((title,), only, (title, ref)), await reader.get_joined(items, 1, only) or {})
    assert record["fields"]["Ref"]["fields"] == {} and record["fields"]["Ref"]["id"] == 1
    assert reader._tables == {}  # idle
