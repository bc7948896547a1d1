"""Run a planned list query and decode its rows into API records.

The page query and the count query go out together in psycopg pipeline mode: one round
trip, two statements. Under READ COMMITTED each statement takes its own snapshot, so a
write committed between them can make the count differ from the page by that write;
a caller that needs both from one snapshot runs :func:`list_records` inside a
REPEATABLE READ transaction.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from storage.query.build import build_count, build_list
from storage.query.plan import Embed, QueryPlan
from storage.schema import ColumnMeta, ColumnType
from storage.values import decode_value, iso_text


async def list_records(
    conn: psycopg.AsyncConnection[Any], plan: QueryPlan, *, count: bool
) -> tuple[list[dict[str, Any]], int | None]:
    """Fetch one page of records for ``plan`` and, when ``count``, the exact total.

    Returns:
        The records as ``{"id", "fields", "created_at", "updated_at"}`` dicts (fields
        in ``plan.output`` order, embedded relations as nested records) and the number
        of rows matching the filters (``None`` unless ``count``).
    """
    page_sql, page_params = build_list(plan)
    count_query = build_count(plan) if count else None
    rows, total = await fetch_page(conn, page_sql, page_params, count_query)
    return [decode_row(plan, row) for row in rows], total


async def fetch_page(
    conn: psycopg.AsyncConnection[Any],
    page_sql: sql.Composed | bytes,
    page_params: list[Any] | None,
    count_query: tuple[sql.Composed | bytes, list[Any] | None] | None,
) -> tuple[list[tuple[Any, ...]], int | None]:
    """Run a page query and, when given, its count query in one round trip (pipeline mode).
    ``None`` parameters: the text has its values bound already (no placeholders)."""
    if count_query is None:
        cur = conn.cursor(row_factory=tuple_row)
        return await (await cur.execute(page_sql, page_params)).fetchall(), None
    async with conn.pipeline():
        page_cur = await conn.cursor(row_factory=tuple_row).execute(page_sql, page_params)
        count_cur = await conn.cursor(row_factory=tuple_row).execute(*count_query)
    rows = await page_cur.fetchall()
    count_row = await count_cur.fetchone()
    return rows, int(count_row[0]) if count_row is not None else 0


def decode_row(plan: QueryPlan, row: tuple[Any, ...]) -> dict[str, Any]:
    """Decode one row of :func:`storage.query.build.build_list` into a record."""
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
