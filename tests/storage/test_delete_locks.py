"""A table delete's locks (storage.meta.lock_table_for_delete) are taken all at once or
not at all: an attempt that waited DELETE_LOCK_STEP_MS for one gives back what it took
and tries again, until it has them all or DELETE_LOCK_WITHIN_S has passed (409 CONFLICT,
nothing taken). The mutual-relations deadlock it prevents is tested end to end in
tests/api/test_tables.py."""

from __future__ import annotations

import asyncio
import os
import time

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from storage import meta
from storage.errors import Conflict

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")


def _table(ws_id: int, table_id: int) -> sql.Composable:
    return sql.SQL("{}.{}").format(sql.Identifier(f"ws_{ws_id}"), sql.Identifier(f"t_{table_id}"))


async def _locks_held(ws_id: int, table_id: int) -> set[str]:
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT mode FROM pg_locks WHERE relation = to_regclass(%s) AND granted",
            (f"ws_{ws_id}.t_{table_id}",))
        return {r[0] for r in await cur.fetchall()}


@pytest.mark.asyncio
async def test_a_delete_steps_back_while_a_write_holds_the_table_then_gets_it(ws, monkeypatch):
    t = ws.create_table("Held", [{"name": "N", "type": "number"}])
    async with await psycopg.AsyncConnection.connect(DSN) as writer, \
            await psycopg.AsyncConnection.connect(DSN, row_factory=dict_row) as deleter:
        await writer.execute(sql.SQL("LOCK TABLE {} IN ROW EXCLUSIVE MODE").format(_table(ws.id, t["id"])))
        await deleter.execute("SET lock_timeout = '7s'")  # the session's own, restored after

        async def release_later() -> None:
            await asyncio.sleep(1.5)
            await writer.rollback()

        began = time.monotonic()
        async with deleter.transaction():
            releasing = asyncio.create_task(release_later())
            # while it steps back, the table is not held by the delete between attempts
            locking = asyncio.create_task(meta.lock_table_for_delete(deleter, workspace_id=ws.id, table_id=t["id"]))
            await asyncio.sleep(0.2)
            # another write is not queued behind the waiting delete for longer than a step
            # (waiting plainly, the delete's request held every new write until the first
            # one ended, 1.5 s)
            async with await psycopg.AsyncConnection.connect(DSN) as other:
                await other.execute("SET lock_timeout = '1s'")
                await other.execute(sql.SQL("LOCK TABLE {} IN ROW EXCLUSIVE MODE").format(_table(ws.id, t["id"])))
                await other.commit()
            assert not locking.done()
            await locking
            await releasing
            assert time.monotonic() - began >= 1.45
            assert "AccessExclusiveLock" in await _locks_held(ws.id, t["id"])
            setting = await (await deleter.execute("SHOW lock_timeout")).fetchone()
            assert setting["lock_timeout"] == "7s"


@pytest.mark.asyncio
async def test_a_delete_that_never_gets_its_locks_is_a_conflict_holding_nothing(ws, monkeypatch):
    t = ws.create_table("Busy", [{"name": "N", "type": "number"}])
    monkeypatch.setattr(meta, "DELETE_LOCK_WITHIN_S", 0.5)
    async with await psycopg.AsyncConnection.connect(DSN) as writer, \
            await psycopg.AsyncConnection.connect(DSN, row_factory=dict_row) as deleter:
        await writer.execute(sql.SQL("LOCK TABLE {} IN ROW EXCLUSIVE MODE").format(_table(ws.id, t["id"])))
        with pytest.raises(Conflict) as refused:
            async with deleter.transaction():  # bounded: waiting plainly, it never ended
                await asyncio.wait_for(meta.lock_table_for_delete(deleter, workspace_id=ws.id, table_id=t["id"]), 10)
        assert "busy" in refused.value.message and refused.value.headers == {"Retry-After": "1"}
        assert await _locks_held(ws.id, t["id"]) == {"RowExclusiveLock"}
        # the writer was never stuck behind the delete: it writes and commits at once
        await writer.execute(sql.SQL("INSERT INTO {} DEFAULT VALUES").format(_table(ws.id, t["id"])))
        await writer.commit()
