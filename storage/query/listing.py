"""Run a planned list query and decode its rows into API records.

The page query and the count query go out together in psycopg pipeline mode: one round
trip, two statements. Under READ COMMITTED each statement takes its own snapshot, so a
write committed between them can make the count differ from the page by that write;
a caller that needs both from one snapshot runs :func:`list_records` inside a
REPEATABLE READ transaction.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import StrEnum
from typing import Any

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from storage.errors import ResultTooLarge
from storage.query import cursor
from storage.query.build import (
    build_count,
    build_counter,
    build_estimate,
    build_list,
    build_page_sizes,
    decoded_size,
)
from storage.query.plan import Embed, QueryPlan
from storage.query.targets import Kind
from storage.schema import ColumnMeta, ColumnType
from storage.values import decode_value, iso_text


class CountMode(StrEnum):
    """How a list's total is found (PostgREST's ``Prefer: count=...``)."""

    EXACT = "exact"  # count(*) of the matches; an unfiltered table reads its row counter
    PLANNED = "planned"  # the planner's estimate (EXPLAIN): no row is read
    ESTIMATED = "estimated"  # exact below ESTIMATE_EXACT_MAX planned rows, planned above


# ``count=estimated`` counts exactly while the planner expects fewer matches than this
# (PostgREST's bound is db-max-rows); above it an exact count would read too many rows
ESTIMATE_EXACT_MAX = 100_000

Statement = tuple[sql.Composed | bytes, list[Any] | None]

# The most a page's records may hold, as the JSON the API writes. A page past it is
# refused (RESULT_TOO_LARGE, with how many of its records fit), never cut short: a client
# paging by offset may take a short page for the last one. Text cells hold up to 1,000,000
# characters, so 1,000 of them would otherwise be a gigabyte, built by PostgreSQL and then
# by the one API process every workspace shares.
PAGE_MAX_BYTES = 16 * 1024 * 1024


def page_too_large(fit: int, cap: int = PAGE_MAX_BYTES) -> ResultTooLarge:
    """The error for a page whose first ``fit`` records fit in ``cap`` bytes and no more."""
    mib = cap // (1024 * 1024)
    if fit == 0:
        return ResultTooLarge(
            f"the page's first record alone holds more than {mib} MiB of JSON, the most a page may hold:"
            " select fewer fields (select=...), or read the record by id", extra={"max_bytes": cap, "fit": 0})
    return ResultTooLarge(
        f"this page's records hold more than {mib} MiB of JSON, the most a page may hold; its first {fit}"
        f" fit: ask for limit={fit} or fewer, or select fewer fields", extra={"max_bytes": cap, "fit": fit})


@asynccontextmanager
async def snapshot(conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    """One REPEATABLE READ snapshot for the statements inside (a page measured, then
    read: a write between them cannot make it longer). Inside a caller's transaction,
    that transaction's."""
    if conn.info.transaction_status != TransactionStatus.IDLE:
        yield
        return
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield


async def check_page_size(conn: psycopg.AsyncConnection[Any], plan: QueryPlan, size: sql.Composable,
                          size_params: list[Any], cap: int = PAGE_MAX_BYTES) -> None:
    """Raise :func:`page_too_large` when the page of ``plan`` holds more than ``cap``
    bytes by ``size`` (:func:`~storage.query.build.build_page_sizes`).

    Raises:
        ResultTooLarge: the page would pass ``cap``.
    """
    query, params = build_page_sizes(plan, size, size_params, cap)
    row = await (await conn.cursor(row_factory=tuple_row).execute(query, params)).fetchone()
    fit, read = (int(row[0]), int(row[1])) if row is not None else (0, 0)
    if fit < min(read, plan.limit):
        raise page_too_large(fit, cap)


def count_mode(count: bool | str | CountMode | None) -> CountMode | None:
    """``True`` → exact, ``False``/``None`` → no count, a mode's name → that mode."""
    if count is None or count is False:
        return None
    if count is True:
        return CountMode.EXACT
    if isinstance(count, str):
        return CountMode(count.strip().lower())  # as REST's count parameter and Prefer header
    return CountMode(count)


@dataclass(frozen=True, slots=True)
class CountQueries:
    """The statements a list's total may need: ``exact`` (count(*)), ``counter`` (the
    row counter of an unfiltered table, else ``None``) and ``estimate`` (EXPLAIN)."""

    exact: Statement
    counter: Statement | None
    estimate: Statement


_COUNTED: set[tuple[str, str, str]] = set()  # databases known to have wds.row_counts


async def has_row_counter(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Whether the database keeps row counters (migration m0013 applied; a scratch
    database built without migrating has none). Positive answers are remembered."""
    info = conn.info
    key = (str(info.host), str(info.port), str(info.dbname))
    if key in _COUNTED:
        return True
    cur = conn.cursor(row_factory=tuple_row)
    row = await (await cur.execute("SELECT to_regclass('wds.row_counts') IS NOT NULL")).fetchone()
    if row is not None and row[0]:
        _COUNTED.add(key)
        return True
    return False


async def page_and_total(
    conn: psycopg.AsyncConnection[Any],
    page_sql: sql.Composed | bytes,
    page_params: list[Any] | None,
    mode: CountMode | None,
    counts: CountQueries,
) -> tuple[list[tuple[Any, ...]], int | None]:
    """The page's rows and the total ``mode`` asks for (``None`` without a mode).

    Exact: count(*) in the page's round trip, or the row counter of an unfiltered table.
    Planned: the planner's estimate, in the page's round trip. Estimated: exact for an
    unfiltered table (its counter costs nothing), else the estimate, then count(*) in a
    second round trip when the estimate is below :data:`ESTIMATE_EXACT_MAX`.
    """
    if mode is None:
        return await fetch_page(conn, page_sql, page_params, None)
    counter = counts.counter if counts.counter is not None and await has_row_counter(conn) else None
    if mode is CountMode.EXACT or (mode is CountMode.ESTIMATED and counter is not None):
        return await fetch_page(conn, page_sql, page_params, counter or counts.exact)
    rows, planned = await fetch_page(conn, page_sql, page_params, counts.estimate, planned=True)
    if mode is CountMode.ESTIMATED and (planned or 0) < ESTIMATE_EXACT_MAX:
        cur = conn.cursor(row_factory=tuple_row)
        found = await (await cur.execute(*counts.exact)).fetchone()
        return rows, int(found[0]) if found is not None else 0
    return rows, planned


async def list_records(
    conn: psycopg.AsyncConnection[Any], plan: QueryPlan, *, count: bool | str | CountMode | None
) -> tuple[list[dict[str, Any]], int | None]:
    """:func:`list_page` without the ``next`` cursor."""
    records, total, _ = await list_page(conn, plan, count=count)
    return records, total


def next_cursor(fp: str, kinds: tuple[Kind, ...] | None, keys: list[Any] | None) -> str | None:
    """The ``next`` cursor after a page's last row with order keys ``keys`` (``None``:
    no next page, or an order no cursor can continue)."""
    if keys is None or kinds is None:
        return None
    return cursor.encode(fp, kinds, keys)


async def list_page(
    conn: psycopg.AsyncConnection[Any], plan: QueryPlan, *, count: bool | str | CountMode | None
) -> tuple[list[dict[str, Any]], int | None, str | None]:
    """Fetch one page of records for ``plan`` and, when ``count``, the total.

    ``count``: ``True`` or a :class:`CountMode` (``True`` is exact); see :func:`page_and_total`.

    Returns:
        The records as ``{"id", "fields", "created_at", "updated_at"}`` dicts (fields
        in ``plan.output`` order, embedded relations as nested records), the number
        of rows matching the filters (``None`` unless ``count``) and the ``next`` cursor
        (``None`` on the last page: the statement reads one row past the page).
    """
    page_sql, page_params = build_list(plan)
    mode = count_mode(count)
    counts = CountQueries(build_count(plan), build_counter(plan), build_estimate(plan)) if mode else None
    async with snapshot(conn):
        # measured first: rows decoded here may embed records and hold files
        await check_page_size(conn, plan, *decoded_size(plan))
        if counts is None:
            rows, total = await fetch_page(conn, page_sql, page_params, None)
        else:
            rows, total = await page_and_total(conn, page_sql, page_params, mode, counts)
    page = rows[: plan.limit]
    keys = page[-1][-1] if len(rows) > plan.limit and page else None
    if isinstance(keys, (str, bytes)):
        keys = json.loads(keys)
    return [decode_row(plan, row[:-1]) for row in page], total, next_cursor(plan.fingerprint, plan.cursor_kinds, keys)


async def fetch_page(
    conn: psycopg.AsyncConnection[Any],
    page_sql: sql.Composed | bytes,
    page_params: list[Any] | None,
    count_query: tuple[sql.Composed | bytes, list[Any] | None] | None,
    *,
    planned: bool = False,
) -> tuple[list[tuple[Any, ...]], int | None]:
    """Run a page query and, when given, its count query in one round trip (pipeline mode).
    ``None`` parameters: the text has its values bound already (no placeholders).
    ``planned``: the count query is an ``EXPLAIN (FORMAT JSON)``; its top node's row
    estimate is the total."""
    if count_query is None:
        cur = conn.cursor(row_factory=tuple_row)
        return await (await cur.execute(page_sql, page_params)).fetchall(), None
    async with conn.pipeline():
        page_cur = await conn.cursor(row_factory=tuple_row).execute(page_sql, page_params)
        count_cur = await conn.cursor(row_factory=tuple_row).execute(*count_query)
    rows = await page_cur.fetchall()
    count_row = await count_cur.fetchone()
    if planned:
        return rows, _plan_rows(count_row[0]) if count_row is not None else 0
    return rows, int(count_row[0]) if count_row is not None else 0


def _plan_rows(explained: Any) -> int:
    """``Plan Rows`` of the top node of an ``EXPLAIN (FORMAT JSON)`` result."""
    if isinstance(explained, (str, bytes)):  # EXPLAIN's column is json: decoded already
        explained = json.loads(explained)
    return int(explained[0]["Plan"]["Plan Rows"])


def decode_row(plan: QueryPlan, row: tuple[Any, ...]) -> dict[str, Any]:
    """Decode one row of :func:`storage.query.build.build_list` (without its last column,
    the order keys) into a record."""
    n_fields = len(plan.fields)
    raw = dict(zip((c.id for c in plan.fields), row[3 : 3 + n_fields], strict=True))
    embedded = dict(
        zip((e.column.id for e in plan.embeds), zip(plan.embeds, row[3 + n_fields :], strict=True), strict=True)
    )
    fields: dict[str, Any] = {}
    for col in plan.output:
        if col.id in embedded:
            embed, value = embedded[col.id]
            fields[col.name] = _decode_embedded(embed, value)
        else:
            fields[col.name] = _decode(col, raw[col.id])
    return {"id": row[0], "fields": fields, "created_at": iso_utc(row[1]), "updated_at": iso_utc(row[2])}


def iso_utc(ts: datetime | str | None) -> str | None:
    """A timestamp as ISO-8601 in UTC (``2026-01-02T03:04:05.123456+00:00``, the fraction
    without trailing zeros as PostgreSQL writes it: :func:`storage.values.iso_text`).

    Normalising to UTC keeps responses independent of the session's TimeZone setting.
    """
    if ts is None:
        return None
    if isinstance(ts, str):
        ts = datetime.fromisoformat(ts)
    return iso_text(ts.astimezone(timezone.utc))


def _decode(col: ColumnMeta, raw: Any) -> Any:
    if col.type is ColumnType.DATE and isinstance(raw, datetime):
        raw = raw.astimezone(timezone.utc)
    return decode_value(col, raw)


def _decode_embedded(embed: Embed, obj: dict[str, Any] | None) -> dict[str, Any] | None:
    if obj is None:
        return None
    values = obj.get("fields") or {}
    fields: dict[str, Any] = {}
    for col in embed.fields:
        raw = values.get(col.name)
        # to_jsonb renders timestamps as ISO text; decode them like a stored datetime
        if col.type is ColumnType.DATE and isinstance(raw, str):
            raw = datetime.fromisoformat(raw)
        fields[col.name] = _decode(col, raw)
    return {
        "id": obj["id"],
        "fields": fields,
        "created_at": iso_utc(obj.get("created_at")),
        "updated_at": iso_utc(obj.get("updated_at")),
    }
