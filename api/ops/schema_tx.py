"""The schema-change transaction and write-time checks shared by table and column operations."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg

from activities import catalogue
from api.state import AppState
from storage import ddl, secrets
from storage.errors import Conflict, QueryTimeout
from storage.pipelines import ColumnLike


async def check_column_hosts(state: AppState, workspace_id: int, specs: list[ColumnLike]) -> None:
    """400 ``CREDENTIAL_HOST_MISMATCH`` early: a step whose literal URL host its named
    credential is not bound to would fail on every record."""
    columns = [(s.name, s.type.value, s.config or {}) for s in specs if s.type.computed]
    if columns:
        async with state.db.connection() as conn:
            await secrets.check_bound_hosts(conn, workspace_id=workspace_id, columns=columns,
                                            defaults=catalogue.param_defaults)


@asynccontextmanager
async def schema_change(state: AppState, workspace_id: int) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A transaction that changes a workspace's schema; all caches drop it on commit.

    Its statements run under the DDL deadline (:func:`storage.ddl.allow_ddl_time`, 5 min), not
    the pool's per-statement one (5 s): a type change, an index or an option removal
    reads and rewrites every row of the table, ~26 s for a million rows. Past the DDL
    deadline: 503 ``QUERY_TIMEOUT``, nothing changed."""
    try:
        async with state.db.transaction() as conn:
            # the deadline first, so that waiting for another schema change of the
            # workspace, which may take minutes, is under it too
            await ddl.allow_ddl_time(conn)
            # serialise schema changes per workspace (names, positions, DDL)
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (workspace_id,))
            try:
                yield conn
            except psycopg.errors.QueryCanceled as exc:
                raise QueryTimeout(
                    f"the schema change ran longer than its {ddl.DDL_TIMEOUT_MS // 1000} s deadline; nothing"
                    " was changed") from exc
            await state.caches.notify(conn, workspace_id=workspace_id)
    except psycopg.errors.UniqueViolation as exc:
        raise Conflict("a table or column with that name already exists") from exc
    finally:
        state.caches.drop_schema(workspace_id)
