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

import logging
import time
from dataclasses import dataclass
from typing import Any

import orjson
import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from storage.db import bound_once
from storage.ddl import ANSWER_TOO_LARGE_SQLSTATE, ro_role
from storage.errors import InvalidSQL, ResultTooLarge, SQLTimeout
from storage.jsontext import compact
from storage.sqlquery.analytic import AnalyticPlan
from storage.sqlquery.build import KIND_TIMESTAMP, MAX_ANSWER_BYTES, Field
from storage.sqlquery.plan import SqlPlan
from storage.values import decode_value, iso

_MIN_TIMEOUT_MS = 1

log = logging.getLogger("wds.sql")


async def run_sql(
    conn: psycopg.AsyncConnection[Any],
    plan: SqlPlan | AnalyticPlan,
    *,
    workspace_id: int,
    timeout_s: float,
    json_rows: bool = False,
    count: bool = False,
) -> dict[str, Any]:
    """Execute a translated query and shape the response.

    Args:
        conn: a connection (autocommit or not; if a transaction is open the query runs
            in a savepoint that is rolled back).
        plan: from :func:`storage.sqlquery.translate` for the same workspace.
        workspace_id: the caller's workspace; its read-only role runs the query.
        timeout_s: the plan's SQL timeout, covering the count and the page together.
        json_rows: return ``rows`` as an :class:`orjson.Fragment` of the JSON text
            PostgreSQL rendered, for a caller that serialises the answer with orjson;
            otherwise that text is parsed (the same statement runs either way, so every
            door answers alike). Plans PostgreSQL cannot render (file columns, long
            names) are read as rows and decoded here.
        count: count every matching row for ``total``. A count reads every match, which
            on a large table costs far more than the page; without it the page is read
            with one row more, which gives ``has_more`` (and ``total`` when this page
            reaches the end).

    Returns:
        ``{"count": n}`` for ``COUNT(*)``; otherwise ``{"rows", "total", "table", "limit",
        "offset", "has_more"}`` with rows flat and keyed by human names (values as in
        REST: select columns give option ids, dates and timestamps ISO strings).
        ``total`` is the exact number of matching rows when ``count`` is set or when the
        page shows it (the page reaches the end of the result), otherwise ``None``.
        An analytic plan answers ``{"rows", "columns", "total", ["table",] "limit",
        "offset", "has_more"}`` (see :func:`_run_analytic`).

    Raises:
        SQLTimeout: the query ran past ``timeout_s`` (408 ``SQL_TIMEOUT``).
        InvalidSQL: the plan belongs to another workspace, or the database rejected a
            value (e.g. a LIKE pattern ending in the escape character).
        ResultTooLarge: ``RESULT_TOO_LARGE`` (400), the page's rows would take more than
            the plan's ``max_bytes`` as JSON; the statement stopped at the row that
            passed it (:func:`storage.sqlquery.build.guarded_page`).
    """
    if isinstance(plan, AnalyticPlan):
        return await _run_analytic(conn, plan, workspace_id=workspace_id, timeout_s=timeout_s,
                                   json_rows=json_rows, count=count)
    if plan.table.workspace_id != workspace_id:
        # Same answer as for a table that does not exist: workspaces are invisible.
        raise InvalidSQL(f"unknown table {plan.table.name!r}")
    if timeout_s <= 0:
        raise ValueError("timeout_s must be positive")
    work = _work(conn, plan, count=count)
    results = await _execute(conn, work, workspace_id=workspace_id, timeout_s=timeout_s, max_bytes=plan.max_bytes)
    return _shape(plan, work, results, json_rows=json_rows)


def answer_too_large(max_bytes: int) -> ResultTooLarge:
    """``RESULT_TOO_LARGE``: the answer would pass the cap on an SQL answer's bytes."""
    mib = max_bytes / 1024**2
    shown = f"{mib:g} MiB ({max_bytes:,} bytes)" if mib >= 1 else f"{max_bytes:,} bytes"
    return ResultTooLarge(
        f"the answer would be larger than {shown} of JSON rows, the most one SQL answer may hold:"
        " select fewer or shorter columns, or fewer rows (LIMIT), and page with LIMIT/OFFSET",
        extra={"max_bytes": max_bytes})


async def _execute(conn: psycopg.AsyncConnection[Any], work: Any, *, workspace_id: int, timeout_s: float,
                   max_bytes: int = MAX_ANSWER_BYTES) -> Any:
    """Run ``work`` in one round trip when the connection is idle in autocommit, else in a
    (sub)transaction; a timeout is ``SQL_TIMEOUT``, a value PostgreSQL rejects ``INVALID_SQL``,
    a page past ``max_bytes`` ``RESULT_TOO_LARGE``."""
    top_level = conn.info.transaction_status == TransactionStatus.IDLE
    try:
        if top_level and conn.autocommit:
            results = await _run_pipelined(conn, work, workspace_id=workspace_id, timeout_s=timeout_s)
        else:
            results = await _run_in_transaction(conn, work, workspace_id=workspace_id, timeout_s=timeout_s,
                                                top_level=top_level)
    except pg_errors.QueryCanceled as exc:
        raise SQLTimeout(f"the query ran longer than the plan's SQL timeout of {timeout_s:g} s") from exc
    except pg_errors.DataError as exc:
        raise InvalidSQL(f"the database rejected a value: {exc.diag.message_primary}") from exc
    except (pg_errors.ProgramLimitExceeded, pg_errors.OutOfMemory, pg_errors.ConfigurationLimitExceeded,
            pg_errors.InternalError_) as exc:
        raise _too_big(exc) from exc
    except psycopg.OperationalError as exc:
        if exc.sqlstate == ANSWER_TOO_LARGE_SQLSTATE:  # wds_sql.answer_too_large
            raise answer_too_large(max_bytes) from None
        raise
    return results


def _too_big(exc: psycopg.Error) -> InvalidSQL:
    """A query the database could not afford: a value past one of its limits (54000, e.g.
    a text built with ``||`` longer than a text may be, or one over PostgreSQL's 1 GB per
    value: XX000 "invalid memory alloc request size"), out of memory (53200) or of
    temporary file space (53400). The client's query asked for it and the same query fails
    the same way: ``INVALID_SQL``, never a 500 (no statement of ours raises these on
    its own)."""
    reason = (exc.diag.message_primary if exc.diag else None) or type(exc).__name__
    if isinstance(exc, pg_errors.InternalError_):
        log.warning("SQL endpoint query failed with XX000: %s", reason)
        if "memory alloc request size" in reason:
            reason = "it would build a value larger than the database can hold (1 GB)"
    elif isinstance(exc, (pg_errors.OutOfMemory, pg_errors.ConfigurationLimitExceeded)):
        reason = f"it needs more memory or temporary space than the database may give one query ({reason})"
    return InvalidSQL(f"the database refused the query: {reason}; narrow it (fewer or shorter values)")


async def _run_analytic(
    conn: psycopg.AsyncConnection[Any],
    plan: AnalyticPlan,
    *,
    workspace_id: int,
    timeout_s: float,
    json_rows: bool,
    count: bool,
) -> dict[str, Any]:
    """An analytic plan: one statement rendering the page as JSON (PostgreSQL names each
    row's keys after the result columns) with the rows read or the exact count, run as
    :func:`run_sql` runs the simple plans. ``rows`` are flat objects keyed by the result
    column names, ``columns`` their names and types, in order."""
    if any(t.workspace_id != workspace_id for t in plan.tables) or plan.workspace_id != workspace_id:
        raise InvalidSQL(f"unknown table {plan.tables[0].name!r}")
    if timeout_s <= 0:
        raise ValueError("timeout_s must be positive")
    key = "counted" if count else "probe"
    statement = plan.bound.get(key)
    if statement is None:  # every value is a literal of the composed text: no parameters
        try:
            statement = plan.bound[key] = (plan.counted if count else plan.probe).as_bytes(conn)
        except RecursionError:  # a long chain of operators nests the composed statement as deep
            raise InvalidSQL("query is nested too deeply") from None
    work = _Work((statement,), "json", count)
    try:
        results = await _execute(conn, work, workspace_id=workspace_id, timeout_s=timeout_s,
                                 max_bytes=plan.max_bytes)
    except (psycopg.ProgrammingError, psycopg.NotSupportedError) as exc:
        # e.g. a function over a type it does not take, a statement too complex to plan
        raise InvalidSQL(f"the database refused the query: {exc.diag.message_primary}") from exc
    (text, number), = results[0]
    if json_rows and any(c.type == "json" for c in plan.columns):
        text = compact(text)  # a computed column's jsonb text has blanks ({"a": 1})
    rows: Any = orjson.Fragment(text) if json_rows else orjson.loads(text)
    if count:
        total: int | None = int(number)
        more = total > plan.offset + plan.limit
    else:
        read = int(number)
        more = read > plan.limit
        total = plan.offset + read if not more and (read or not plan.offset) else None
    out: dict[str, Any] = {
        "rows": rows,
        "columns": [{"name": c.name, "type": c.type} for c in plan.columns],
        "total": total,
    }
    if plan.table is not None:
        out["table"] = plan.table.name
    out.update(limit=plan.limit, offset=plan.offset, has_more=more)
    return out


@dataclass(frozen=True, slots=True)
class _Work:
    """The statements answering one request, in order, and how to read their results."""

    statements: tuple[bytes, ...]
    shape: str  # "count" | "json" (rendered page + count or rows read) | "rows" (decoded)
    counting: bool


def _work(conn: psycopg.AsyncConnection[Any], plan: SqlPlan, *, count: bool) -> _Work:
    def bound(key: str, query: sql.Composed, params: tuple[Any, ...]) -> bytes:
        return bound_once(conn, plan.bound, key, query, params)

    if plan.count_only or plan.page_query is None:
        return _Work((bound("count", plan.count_query, plan.where_params),), "count", True)
    if count and plan.json_page is not None:
        return _Work((bound("json", plan.json_page.query, plan.json_page.params),), "json", True)
    if not count and plan.json_probe is not None:
        return _Work((bound("probe", plan.json_probe.query, plan.json_probe.params),), "json", False)
    if count:
        return _Work((bound("count", plan.count_query, plan.where_params),
                      bound("rows", plan.page_query, plan.rows_params)), "rows", True)
    return _Work((bound("probe_rows", plan.page_query, plan.probe_rows_params),), "rows", False)


def _shape(plan: SqlPlan, work: _Work, results: list[list[tuple[Any, ...]]], *, json_rows: bool) -> dict[str, Any]:
    rows: Any
    if work.shape == "count":
        return {"count": int(results[0][0][0])}
    if work.shape == "json":
        (text, number), = results[0]  # an aggregate always gives one row
        if not json_rows:
            rows = orjson.loads(text)
        elif any(f.meta is not None and f.meta.computed and f.meta.scalar_value_type is None for f in plan.fields):
            rows = orjson.Fragment(compact(text))  # a computed column's jsonb text has blanks ({"a": 1})
        else:
            rows = orjson.Fragment(text)
        read = int(number)
        total: int | None = read if work.counting else None
    else:
        raw = results[-1]
        total = int(results[0][0][0]) if work.counting else None
        read = len(raw)
        rows = [_row(plan.fields, r) for r in raw[:plan.limit]]
        # measured row by row in PostgreSQL already (a lower bound); exactly here
        if len(orjson.dumps(rows, default=str)) > plan.max_bytes:
            raise answer_too_large(plan.max_bytes)
    if work.counting:
        assert total is not None
        more = total > plan.offset + plan.limit
    else:
        # read at most limit + 1 rows: one past the page means more match; a page that ends
        # the result (and is not past its end) shows the exact total
        more = read > plan.limit
        total = plan.offset + read if not more and (read or not plan.offset) else None
    return {
        "rows": rows,
        "total": total,
        "table": plan.table.name,
        "limit": plan.limit,
        "offset": plan.offset,
        "has_more": more,
    }


async def _run_pipelined(
    conn: psycopg.AsyncConnection[Any], work: _Work, *, workspace_id: int, timeout_s: float
) -> list[list[tuple[Any, ...]]]:
    """The whole read-only transaction in one round trip (psycopg pipeline mode): begin
    read only, take the workspace's read-only role and the timeout, run the statements,
    roll back. Each statement gets the plan's timeout (``statement_timeout`` is per
    statement)."""
    settings = sql.SQL(
        "SELECT set_config('role', {}, true), set_config('search_path', 'pg_catalog', true),"
        " set_config('statement_timeout', {}, true)"
    ).format(sql.Literal(ro_role(workspace_id)), sql.Literal(str(max(_MIN_TIMEOUT_MS, int(timeout_s * 1000)))))
    try:
        async with conn.pipeline():
            await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            await conn.execute(settings)
            cursors = [await conn.cursor(row_factory=tuple_row).execute(statement) for statement in work.statements]
            await conn.execute("ROLLBACK")
        return [await cur.fetchall() for cur in cursors]
    except BaseException:
        await _abort(conn)
        raise


async def _run_in_transaction(
    conn: psycopg.AsyncConnection[Any], work: _Work, *, workspace_id: int, timeout_s: float, top_level: bool
) -> list[list[tuple[Any, ...]]]:
    """The same statements in a transaction (or a savepoint of the caller's), always
    rolled back; the timeout is one budget for all of them."""
    deadline = time.monotonic() + timeout_s
    results: list[list[tuple[Any, ...]]] = []
    async with conn.transaction(force_rollback=True), conn.cursor(row_factory=tuple_row) as cur:
        # REPEATABLE READ gives the count and the page one snapshot; it can only be
        # chosen at the start of a top-level transaction.
        mode = "ISOLATION LEVEL REPEATABLE READ, READ ONLY" if top_level else "READ ONLY"
        await cur.execute(sql.SQL("SET TRANSACTION " + mode))
        await cur.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(ro_role(workspace_id))))
        await cur.execute(sql.SQL("SET LOCAL search_path TO pg_catalog"))
        for statement in work.statements:
            await _set_timeout(cur, deadline)
            await cur.execute(statement)
            results.append(await cur.fetchall())
    return results


async def _abort(conn: psycopg.AsyncConnection[Any]) -> None:
    """After a failed pipeline: end the transaction it leaves open (the role and settings
    die with it) and forget every prepared statement, on both sides. psycopg (3.3) counts
    a statement as prepared when it sends it in a pipeline; when the pipeline fails
    before that statement, PostgreSQL never saw its Parse, and every later use of the
    name (``ROLLBACK`` first) failed with "prepared statement … does not exist", which
    left the pooled connection broken for every later request (found by the analytic
    fuzz test). Only failures pay for this: the statements are prepared again after a
    few calls."""
    try:
        if conn.info.transaction_status != TransactionStatus.IDLE:
            await conn.execute("ROLLBACK", prepare=False)
    except psycopg.Error:
        pass
    prepared = getattr(conn, "_prepared", None)  # psycopg's PrepareManager (no public reset)
    if prepared is not None:
        prepared.clear()  # and psycopg sends DEALLOCATE ALL before the connection's next statement
    else:  # pragma: no cover - another psycopg: leave nothing prepared at all
        conn.prepare_threshold = None


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
