"""``Database.connection()`` and the pool's quick checkout (``storage.db.Checkout``,
``LifoPool.getconn``/``putconn``): what the library's path did, they still do."""

from __future__ import annotations

import asyncio
import os
import uuid

import psycopg
import pytest

from storage.db import Database, current_workspace
from storage.errors import Conflict, LimitExceeded, QueryTimeout, Unavailable

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")


async def _db(**kwargs: int) -> Database:
    db = Database(DSN, **{"min_size": 2, "max_size": 4, **kwargs})
    await db.open()
    return db


@pytest.mark.asyncio
async def test_the_quick_checkout_is_on_with_the_installed_psycopg_pool() -> None:
    """If a psycopg_pool release renames the state the quick path reads, every checkout
    silently takes the library's slower path: this says so."""
    db = await _db()
    try:
        assert db.pool.quick
        before = db.pool.get_stats().get("requests_num", 0)
        async with db.connection() as conn:
            await conn.execute("SELECT 1")
        assert db.pool.get_stats().get("requests_num", 0) == before + 1  # counted as the library counts
    finally:
        await db.close()


@pytest.mark.asyncio
async def test_an_open_transaction_is_committed_on_success_and_rolled_back_on_error() -> None:
    """As ``AsyncConnectionPool.connection()`` does (psycopg's ``async with conn``)."""
    db = await _db()
    table = f"t_checkout_{uuid.uuid4().hex[:8]}"
    try:
        await db.execute(f"CREATE TABLE {table} (v int)")
        async with db.connection() as conn:
            await conn.execute("BEGIN")
            await conn.execute(f"INSERT INTO {table} VALUES (1)")
        with pytest.raises(RuntimeError):
            async with db.connection() as conn:
                await conn.execute("BEGIN")
                await conn.execute(f"INSERT INTO {table} VALUES (2)")
                raise RuntimeError("the body failed")
        rows = await db.fetch(f"SELECT v FROM {table} ORDER BY v")
        assert [r["v"] for r in rows] == [1]
        # every connection went back idle: none is left inside a transaction
        for _ in range(4):
            async with db.connection() as conn:
                assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
    finally:
        await db.execute(f"DROP TABLE IF EXISTS {table}")
        await db.close()


@pytest.mark.asyncio
async def test_expired_and_broken_connections_are_not_handed_out_again() -> None:
    db = await _db(min_size=1, max_size=2)
    try:
        async with db.connection() as conn:
            expired_pid = conn.info.backend_pid
            conn._expire_at = 0.0  # past its max_lifetime: the library closes it on return
        broken_pid = 0
        with pytest.raises(Unavailable):  # a connection lost while in use is the client's 503 ...
            async with db.connection() as conn:
                assert conn.info.backend_pid != expired_pid
                broken_pid = conn.info.backend_pid
                async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as admin:  # outside the pool
                    await admin.execute("SELECT pg_terminate_backend(%s)", (broken_pid,))
                await conn.execute("SELECT 1")
        for _ in range(3):  # ... and it is never handed out again
            async with db.connection() as conn:
                assert conn.info.backend_pid != broken_pid
                await conn.execute("SELECT 1")
    finally:
        await db.close()


@pytest.mark.asyncio
async def test_a_waiting_client_gets_the_connection_given_back() -> None:
    db = await _db(min_size=1, max_size=2, per_workspace=0)
    try:
        held = [await db.pool.getconn() for _ in range(2)]  # the pool is empty and full-sized
        waiter = asyncio.create_task(db.fetchrow("SELECT 7 AS v"))
        await asyncio.sleep(0.1)
        assert not waiter.done()
        await db.pool.putconn(held.pop())
        assert (await asyncio.wait_for(waiter, 5))["v"] == 7
        await db.pool.putconn(held.pop())
        assert db.pool.get_stats()["pool_available"] == 2
    finally:
        await db.close()


@pytest.mark.asyncio
async def test_failures_become_service_errors_and_give_the_slot_back() -> None:
    """Timeouts, program limits and lost connections leave as the client's errors, and
    every one of them returns the workspace's slot (a leak would lock the workspace out)."""
    db = await _db(per_workspace=1)
    token = current_workspace.set(4242)
    try:
        for _ in range(3):
            with pytest.raises(QueryTimeout):
                async with db.transaction() as conn:
                    await conn.execute("SET LOCAL statement_timeout = 50")
                    await conn.execute("SELECT pg_sleep(1)")
            with pytest.raises(LimitExceeded):  # SQLSTATE 54000, refused before any allocation
                await db.fetchrow("SELECT array_fill(0, ARRAY[100000, 100000])")
            with pytest.raises(ZeroDivisionError):
                async with db.connection():
                    raise ZeroDivisionError
        # the one slot is free, and a nested checkout in the same task does not wait for it
        async with db.connection() as outer:
            async with db.connection() as inner:
                assert inner is not outer
                assert (await (await inner.execute("SELECT 1 AS v")).fetchone())["v"] == 1
    finally:
        current_workspace.reset(token)
        await db.close()


@pytest.mark.asyncio
async def test_a_full_workspace_waits_then_is_told_it_is_busy() -> None:
    db = await _db(per_workspace=1)
    db.timeout_s = 0.2
    token = current_workspace.set(4343)
    try:
        async def hold() -> None:
            async with db.connection() as conn:
                await conn.execute("SELECT pg_sleep(0.6)")

        holder = asyncio.create_task(hold())
        await asyncio.sleep(0.1)
        with pytest.raises(Unavailable) as err:
            await db.fetchrow("SELECT 1")
        assert err.value.code == "WORKSPACE_BUSY"
        await holder
        assert (await db.fetchrow("SELECT 2 AS v"))["v"] == 2  # the slot came back
    finally:
        current_workspace.reset(token)
        await db.close()


@pytest.mark.asyncio
async def test_a_deadlock_is_a_conflict_to_retry_not_a_lost_connection() -> None:
    """Two transactions locking two rows in opposite orders: PostgreSQL ends one (40P01).
    It read "the database connection was lost" (503) and set the pool checking its idle
    connections; it is a 409 to retry, and the connection goes on serving."""
    db = await _db(per_workspace=0)
    table = f"t_deadlock_{uuid.uuid4().hex[:8]}"
    try:
        await db.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v int)")
        await db.execute(f"INSERT INTO {table} VALUES (1, 0), (2, 0)")
        first_locked, second_locked = asyncio.Event(), asyncio.Event()

        async def cross(mine: int, theirs: int, locked: asyncio.Event, other: asyncio.Event) -> None:
            async with db.transaction() as conn:
                await conn.execute(f"UPDATE {table} SET v = v + 1 WHERE id = %s", (mine,))
                locked.set()
                await other.wait()
                await conn.execute(f"UPDATE {table} SET v = v + 1 WHERE id = %s", (theirs,))

        results = await asyncio.gather(cross(1, 2, first_locked, second_locked),
                                       cross(2, 1, second_locked, first_locked), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        assert len(errors) == 1 and isinstance(errors[0], Conflict), results
        assert errors[0].code == "CONFLICT" and "deadlock" in errors[0].message, errors[0].message
        assert errors[0].headers == {"Retry-After": "1"}
        rows = await db.fetch(f"SELECT v FROM {table} ORDER BY id")
        assert [r["v"] for r in rows] == [1, 1]  # the winner's two updates, none of the loser's
    finally:
        await db.execute(f"DROP TABLE IF EXISTS {table}")
        await db.close()
