"""Concurrent reads of single records by id, coalesced per table (the DataLoader pattern).

A backend under load sends many ``GET …/records/{id}`` at once. Each would cost its own
PostgreSQL round trip; on a small machine the round trips themselves (two context switches
and a socket write each way) cost more than the lookup. :class:`RecordReader` sends a read
at once when no other read of the same table is in flight; reads that arrive while one is
in flight wait for it to finish and then go together as one
``SELECT <columns> FROM … WHERE id = ANY(…)`` (the columns listed from the table's current
schema, never ``*``: :func:`storage.records.row_list`). Nobody waits for a timer: a lone read costs exactly
what it did, and under load each read waits at most for the one query ahead of it.

Every read still sees every write that committed before it was asked for: a waiting read is
sent after it arrived, never answered from a query that started earlier.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

from storage import ddl
from storage.db import Database
from storage.records import row_list
from storage.schema import TableMeta

Row = dict[str, Any]
_Waiter = tuple[int, "asyncio.Future[Row | None]"]


@dataclass
class _Table:
    running: bool = False
    waiting: list[_Waiter] = field(default_factory=list)


class RecordReader:
    """See the module docstring. One per process, over the API's :class:`Database`."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._tables: dict[tuple[int, int], _Table] = {}
        self._sql: dict[tuple[int, int], tuple[str, str]] = {}  # (one, many)
        self._lists: dict[tuple[int, int], str] = {}  # the row list ``_sql`` was composed with
        self._meta: dict[tuple[int, int], TableMeta] = {}  # the latest schema each table was read with
        self._tasks: set[asyncio.Task[None]] = set()

    async def get(self, table: TableMeta, record_id: int) -> Row | None:
        """The physical row of ``record_id`` (every column of ``table``), ``None`` if there is none.

        Raises:
            Unavailable: the database cannot be reached (as :meth:`Database.connection`).
        """
        key = (table.workspace_id, table.id)
        self._meta[key] = table
        state = self._tables.get(key)
        if state is None:
            state = self._tables[key] = _Table()
        if state.running:
            fut: asyncio.Future[Row | None] = asyncio.get_running_loop().create_future()
            state.waiting.append((record_id, fut))
            return await fut
        state.running = True
        try:
            rows = await self._fetch(key, [record_id])
        finally:
            self._next(key)
        return rows[0] if rows else None

    def _next(self, key: tuple[int, int]) -> None:
        """The read ahead finished: send everything that waited for it as one query."""
        state = self._tables[key]
        batch = [(rid, fut) for rid, fut in state.waiting if not fut.done()]  # done: the caller left
        state.waiting = []
        if not batch:
            del self._tables[key]  # idle: the next read goes at once
            self._meta.pop(key, None)
            return
        task = asyncio.get_running_loop().create_task(self._run(key, batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, key: tuple[int, int], batch: list[_Waiter]) -> None:
        try:
            rows = await self._fetch(key, sorted({rid for rid, _ in batch}))
        except asyncio.CancelledError:  # shutting down
            for _, fut in batch:
                fut.cancel()
            raise
        except Exception as exc:  # every waiter gets the error it would have had alone
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
        else:
            by_id = {row["id"]: row for row in rows}
            for rid, fut in batch:
                if not fut.done():
                    fut.set_result(by_id.get(rid))
        finally:
            self._next(key)

    async def _fetch(self, key: tuple[int, int], ids: list[int]) -> list[Row]:
        one, many = self._statements(key)
        async with self.db.connection() as conn:
            if len(ids) == 1:
                cur = await conn.execute(one, (ids[0],))
            else:
                cur = await conn.execute(many, (ids,))
            return await cur.fetchall()

    def _statements(self, key: tuple[int, int]) -> tuple[str, str]:
        # a batch reads with the schema of its latest reader (a column added since an
        # earlier reader asked only adds a field)
        columns = row_list(self._meta[key])
        found = self._sql.get(key)
        if found is None or self._lists.get(key) != columns.as_string(None):
            target = ddl.qualified(*key)
            if len(self._sql) >= 4096:
                self._sql.clear()
                self._lists.clear()
            self._lists[key] = columns.as_string(None)
            found = self._sql[key] = (
                sql.SQL("SELECT {} FROM {} WHERE id = %s").format(columns, target).as_string(None),
                sql.SQL("SELECT {} FROM {} WHERE id = ANY(%s::bigint[])").format(columns, target).as_string(None),
            )
        return found
