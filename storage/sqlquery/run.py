"""Running a :class:`SqlPlan`: read-only, workspace-scoped, time-boxed.

Defence in depth around the translator's allow-list: the plan runs in a READ ONLY
transaction, as the NOLOGIN role ``wds_ro_<workspace_id>`` (``storage.ddl.ro_role``: USAGE
on ``ws_<id>`` and SELECT on its tables, nothing else), with ``search_path`` pinned to ``pg_catalog`` and a
``statement_timeout`` that shares one budget between the count and the page. The
transaction is always rolled back: it never wrote anything, and rolling back also undoes
the ``SET LOCAL`` settings when the caller's connection was already inside a transaction
(we then run in a savepoint).
"""

from __future__ import annotations

import time
from typing import Any

import orjson
import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from storage.ddl import ro_role
from storage.errors import InvalidSQL, SQLTimeout
from storage.sqlquery.build import KIND_TIMESTAMP, Field
from storage.sqlquery.plan import SqlPlan
from storage.values import decode_value, iso

_MIN_TIMEOUT_MS = 1


async def run_sql(
    conn: psycopg.AsyncConnection[Any],
    plan: SqlPlan,
    *,
    workspace_id: int,
    timeout_s: float,
    json_rows: bool = False,
) -> dict[str, Any]:
    """Execute a translated query and shape the response.

    Args:
        conn: a connection (autocommit or not; if a transaction is open the query runs
            in a savepoint that is rolled back).
        plan: from :func:`storage.sqlquery.translate` for the same workspace.
        workspace_id: the caller's workspace; its read-only role runs the query.
        timeout_s: the plan's SQL timeout, covering the count and the page together.
        json_rows: let PostgreSQL render the page (count and rows in one statement) and
            return ``rows`` as an :class:`orjson.Fragment` of JSON text, for a caller that
            serialises the answer with orjson; plans it cannot render decode as usual.

    Returns:
        ``{"count": n}`` for ``COUNT(*)``; otherwise ``{"rows", "total", "table", "limit",
        "offset"}`` with rows flat and keyed by human names (values as in REST: select
        columns give option ids, dates and timestamps ISO strings).

    Raises:
        SQLTimeout: the query ran past ``timeout_s`` (408 ``SQL_TIMEOUT``).
        InvalidSQL: the plan belongs to another workspace, or the database rejected a
            value (e.g. a LIKE pattern ending in the escape character).
    """
    if plan.table.workspace_id != workspace_id:
        # Same answer as for a table that does not exist: workspaces are invisible.
        raise InvalidSQL(f"unknown table {plan.table.name!r}")
    if timeout_s <= 0:
        raise ValueError("timeout_s must be positive")
    top_level = conn.info.transaction_status == TransactionStatus.IDLE
    as_json = json_rows and plan.json_query is not None
    if top_level and conn.autocommit:
        total, raw_rows = await _run_pipelined(conn, plan, workspace_id=workspace_id, timeout_s=timeout_s,
                                               as_json=as_json)
        if plan.count_only or plan.rows_query is None:
            return {"count": total}
        return _shape(plan, total, raw_rows, as_json=as_json)
    deadline = time.monotonic() + timeout_s
    try:
        async with conn.transaction(force_rollback=True):
            async with conn.cursor(row_factory=tuple_row) as cur:
                # REPEATABLE READ gives the count and the page one snapshot; it can only be
                # chosen at the start of a top-level transaction.
                mode = "ISOLATION LEVEL REPEATABLE READ, READ ONLY" if top_level else "READ ONLY"
                await cur.execute(sql.SQL("SET TRANSACTION " + mode))
                await cur.execute(
                    sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(ro_role(workspace_id)))
                )
                await cur.execute(sql.SQL("SET LOCAL search_path TO pg_catalog"))
                await _set_timeout(cur, deadline)
                if as_json and plan.json_query is not None:
                    await cur.execute(plan.json_query, plan.json_params)
                    page = await cur.fetchone()
                    assert page is not None  # an aggregate always gives one row
                    return _shape(plan, int(page[1]), [page], as_json=True)
                await cur.execute(plan.count_query, plan.where_params)
                row = await cur.fetchone()
                total = int(row[0]) if row is not None else 0
                if plan.count_only or plan.rows_query is None:
                    return {"count": total}
                await _set_timeout(cur, deadline)
                await cur.execute(plan.rows_query, plan.rows_params)
                raw_rows = await cur.fetchall()
    except pg_errors.QueryCanceled as exc:
        raise SQLTimeout(f"the query ran longer than the plan's SQL timeout of {timeout_s:g} s") from exc
    except pg_errors.DataError as exc:
        raise InvalidSQL(f"the database rejected a value: {exc.diag.message_primary}") from exc
    return _shape(plan, total, raw_rows)


def _shape(plan: SqlPlan, total: int, raw_rows: list[tuple[Any, ...]], *, as_json: bool = False) -> dict[str, Any]:
    rows: Any = orjson.Fragment(raw_rows[0][0]) if as_json else [_row(plan.fields, raw) for raw in raw_rows]
    return {
        "rows": rows,
        "total": total,
        "table": plan.table.name,
        "limit": plan.limit,
        "offset": plan.offset,
    }


async def _run_pipelined(
    conn: psycopg.AsyncConnection[Any], plan: SqlPlan, *, workspace_id: int, timeout_s: float, as_json: bool
) -> tuple[int, list[tuple[Any, ...]]]:
    """The whole read-only transaction in one round trip (psycopg pipeline mode): begin
    read only, take the workspace's read-only role and the timeout, count, page, roll back.
    Each statement gets the plan's timeout (``statement_timeout`` is per statement).
    With ``as_json`` the count and the rendered page are one statement, whose single row
    is returned as the only raw row."""
    settings = sql.SQL(
        "SELECT set_config('role', {}, true), set_config('search_path', 'pg_catalog', true),"
        " set_config('statement_timeout', {}, true)"
    ).format(sql.Literal(ro_role(workspace_id)), sql.Literal(str(max(_MIN_TIMEOUT_MS, int(timeout_s * 1000)))))
    rows_cur = count_cur = json_cur = None
    try:
        async with conn.pipeline():
            await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            await conn.execute(settings)
            if as_json and plan.json_query is not None:
                json_cur = await conn.cursor(row_factory=tuple_row).execute(plan.json_query, plan.json_params)
            else:
                count_cur = await conn.cursor(row_factory=tuple_row).execute(plan.count_query, plan.where_params)
                if not plan.count_only and plan.rows_query is not None:
                    rows_cur = await conn.cursor(row_factory=tuple_row).execute(plan.rows_query, plan.rows_params)
            await conn.execute("ROLLBACK")
        if json_cur is not None:
            page = await json_cur.fetchone()
            assert page is not None  # an aggregate always gives one row
            return int(page[1]), [page]
        row = await count_cur.fetchone() if count_cur is not None else None
        raw_rows = await rows_cur.fetchall() if rows_cur is not None else []
    except pg_errors.QueryCanceled as exc:
        await _abort(conn)
        raise SQLTimeout(f"the query ran longer than the plan's SQL timeout of {timeout_s:g} s") from exc
    except pg_errors.DataError as exc:
        await _abort(conn)
        raise InvalidSQL(f"the database rejected a value: {exc.diag.message_primary}") from exc
    except BaseException:
        await _abort(conn)
        raise
    return (int(row[0]) if row is not None else 0), raw_rows


async def _abort(conn: psycopg.AsyncConnection[Any]) -> None:
    # a failed pipeline leaves the transaction open: end it so the role and settings die with it
    if conn.info.transaction_status != TransactionStatus.IDLE:
        try:
            await conn.execute("ROLLBACK")
        except psycopg.Error:
            pass


async def _set_timeout(cur: psycopg.AsyncCursor[Any], deadline: float) -> None:
    remaining_ms = max(_MIN_TIMEOUT_MS, int((deadline - time.monotonic()) * 1000))
    await cur.execute(sql.SQL("SET LOCAL statement_timeout = {}").format(sql.Literal(remaining_ms)))


def _row(fields: tuple[Field, ...], raw: tuple[Any, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field, value in zip(fields, raw, strict=True):
        if field.meta is not None:
            out[field.name] = decode_value(field.meta, value)
        elif field.kind == KIND_TIMESTAMP:
            out[field.name] = iso(value)
        else:
            out[field.name] = value
    return out
