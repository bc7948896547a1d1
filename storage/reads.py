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

A read with embedded related records (``GET …/records/{id}?expand=…``) coalesces the same
way, keyed by the table and what it embeds: one statement reads the rows and, by a
``LEFT JOIN`` per embed, the related rows their relation cells name (:meth:`RecordReader.get_joined`),
so an expanded read costs one round trip as a plain one does.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

from storage import ddl
from storage.db import Database
from storage.records import column_decoders, row_list
from storage.schema import ColumnMeta, TableMeta
from storage.values import decode_value, iso

Row = dict[str, Any]
Key = tuple[Any, ...]  # (workspace, table) or (workspace, table, embeds' signature)
_Waiter = tuple[int, "asyncio.Future[Row | None]"]


@dataclass
class _Table:
    running: bool = False
    waiting: list[_Waiter] = field(default_factory=list)


class RecordReader:
    """See the module docstring. One per process, over the API's :class:`Database`."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._tables: dict[Key, _Table] = {}
        self._sql: dict[Key, tuple[str, str]] = {}  # (one, many)
        self._lists: dict[Key, Any] = {}  # the row list ``_sql`` was composed with
        self._meta: dict[Key, TableMeta] = {}  # the latest schema each table was read with
        self._embeds: dict[Key, tuple[Embedding, ...]] = {}  # and, for a joined read, what it embeds
        self._tasks: set[asyncio.Task[None]] = set()

    async def get(self, table: TableMeta, record_id: int) -> Row | None:
        """The physical row of ``record_id`` (every column of ``table``), ``None`` if there is none.

        Raises:
            Unavailable: the database cannot be reached (as :meth:`Database.connection`).
        """
        key = (table.workspace_id, table.id)
        self._meta[key] = table
        return await self._get(key, record_id)

    async def get_joined(self, table: TableMeta, record_id: int, embeds: tuple[Embedding, ...]) -> Row | None:
        """The physical row of ``record_id`` with, per embed, the related table's row its
        relation cell names under the embed's :attr:`Embedding.aliases` (all ``NULL``: an
        empty cell or no such record), read in one statement; concurrent reads of the same
        table and embeds share one. ``None``: no such record. :func:`joined_record` makes
        the API record of it.

        Raises:
            Unavailable: the database cannot be reached (as :meth:`Database.connection`).
        """
        key = (table.workspace_id, table.id, tuple([e.signature for e in embeds]))
        self._meta[key] = table
        self._embeds[key] = embeds
        return await self._get(key, record_id)

    async def _get(self, key: Key, record_id: int) -> Row | None:
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

    def _next(self, key: Key) -> None:
        """The read ahead finished: send everything that waited for it as one query."""
        state = self._tables[key]
        batch = [(rid, fut) for rid, fut in state.waiting if not fut.done()]  # done: the caller left
        state.waiting = []
        if not batch:
            del self._tables[key]  # idle: the next read goes at once
            self._meta.pop(key, None)
            self._embeds.pop(key, None)
            return
        task = asyncio.get_running_loop().create_task(self._run(key, batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, key: Key, batch: list[_Waiter]) -> None:
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

    async def _fetch(self, key: Key, ids: list[int]) -> list[Row]:
        one, many = self._statements(key)
        async with self.db.connection() as conn:
            if len(ids) == 1:
                cur = await conn.execute(one, (ids[0],))
            else:
                cur = await conn.execute(many, (ids,))
            return await cur.fetchall()

    def _statements(self, key: Key) -> tuple[str, str]:
        if len(key) == 3:
            return self._joined_statements(key)
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

    def _joined_statements(self, key: Key) -> tuple[str, str]:
        # as _statements: composed anew when the table or an embedded one changed shape
        table, embeds = self._meta[key], self._embeds[key]
        shape = (table.columns, *(e.table.columns for e in embeds), *(e.fields for e in embeds))
        found = self._sql.get(key)
        known = self._lists.get(key)
        if found is None or known is None or len(known) != len(shape) or any(
                a is not b for a, b in zip(known, shape)):
            items = [row_list(table, "t")]
            joins = []
            for i, embed in enumerate(embeds):
                alias = sql.Identifier(f"e{i}")
                cast = {c.physical: c for c in embed.fields}
                items += [sql.SQL("{}::{} AS {}").format(sql.Identifier(f"e{i}", name), sql.SQL(ddl.pg_type(cast[name].type)),
                                                        sql.Identifier(out))
                          if name in cast else sql.SQL("{} AS {}").format(sql.Identifier(f"e{i}", name), sql.Identifier(out))
                          for out, name in embed.aliases]
                joins.append(sql.SQL(" LEFT JOIN {} {} ON {}.id = {}").format(
                    ddl.qualified(embed.table.workspace_id, embed.table.id), alias, alias,
                    sql.Identifier("t", embed.column.physical)))
            head = sql.SQL("SELECT {} FROM {} t{}").format(sql.SQL(", ").join(items), ddl.qualified(*key[:2]),
                                                          sql.SQL("").join(joins))
            if len(self._sql) >= 4096:
                self._sql.clear()
                self._lists.clear()
            self._lists[key] = shape
            found = self._sql[key] = (
                sql.SQL("{} WHERE t.id = %s").format(head).as_string(None),
                # the ids through an InitPlan: the planner cannot count them, so its custom
                # plans cost what the generic one does and PostgreSQL keeps the generic plan.
                # Given as ``ANY(%s)``, a custom plan of a batch under 10 ids looked cheaper
                # than the generic one (planned for 10) and the join was planned anew on
                # every call (~300 µs a batch of 8 against ~200 µs so)
                sql.SQL("{} WHERE t.id = ANY((SELECT %s::bigint[])::bigint[])").format(head).as_string(None),
            )
        return found


@dataclass(frozen=True, slots=True)
class Embedding:
    """A relation column of the read table (``column``), the table it relates to and the
    columns of it to read (``fields``): one ``LEFT JOIN`` of :meth:`RecordReader.get_joined`.
    ``aliases``: ``(result column, related row key)`` pairs, ``id`` first."""

    column: ColumnMeta
    table: TableMeta
    fields: tuple[ColumnMeta, ...]
    signature: tuple[Any, ...] = field(init=False)
    aliases: tuple[tuple[str, str], ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "signature", (self.column.id, self.table.workspace_id, self.table.id,
                                               tuple(c.id for c in self.fields)))
        names = ("id", "created_at", "updated_at", *(c.physical for c in self.fields))
        object.__setattr__(self, "aliases", tuple((f"{self.column.id}:{name}", name) for name in names))


Step = tuple[str, str, "ColumnMeta | None", "tuple[str, str, str, tuple[tuple[str, str, ColumnMeta | None], ...]] | None"]


def joined_steps(fields: tuple[ColumnMeta, ...], embeds: tuple[Embedding, ...],
                 output: tuple[ColumnMeta, ...]) -> tuple[Step, ...]:
    """How :func:`joined_record` shapes a row of :meth:`RecordReader.get_joined`: per field
    of ``output`` in order, ``(name, row key, column to decode or None, embed or None)``;
    an embed is ``(id, created_at, updated_at keys, its fields' decoders)``. Built once
    per plan."""
    plain = {name: (phys, col) for name, phys, col in column_decoders(fields)}
    by_column = {e.column.id: e for e in embeds}
    steps: list[Step] = []
    for c in output:
        embed = by_column.get(c.id)
        if embed is None:
            phys, col = plain[c.name]
            steps.append((c.name, phys, col, None))
            continue
        alias = {name: out for out, name in embed.aliases}
        decs = tuple((name, alias[phys], col) for name, phys, col in column_decoders(embed.fields))
        steps.append((c.name, alias["id"], None, (alias["id"], alias["created_at"], alias["updated_at"], decs)))
    return tuple(steps)


def joined_record(steps: tuple[Step, ...], row: Row) -> dict[str, Any]:
    """The API record of a joined row, its embedded records in place (as
    :func:`storage.records.row_to_record` makes each of them, in ``output``'s order)."""
    fields: dict[str, Any] = {}
    get = row.get
    for name, key, col, embed in steps:
        v = get(key)
        if embed is not None:
            if v is None:
                fields[name] = None
                continue
            _, created, updated, decs = embed
            v = {"id": v,
                 "fields": {n: (x if c is None else decode_value(c, x)) for n, k, c in decs for x in (get(k),)},
                 "created_at": iso(get(created)), "updated_at": iso(get(updated))}
            fields[name] = v
        else:
            fields[name] = v if col is None else decode_value(col, v)
    return {"id": row["id"], "fields": fields, "created_at": iso(row["created_at"]),
            "updated_at": iso(row["updated_at"])}
