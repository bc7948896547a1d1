"""Schedules of bulk runs (``wds.schedules``): one row per Temporal Schedule.

``spec`` holds ``{cron | interval_seconds, filters, column_ids, caller}``; the Temporal
Schedule (id ``schedule/ws<ws>/t<table>/<id>``) is the source of truth for firing, the
row for listing and for the rights a firing runs with.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

Conn = AsyncConnection[Any]


def temporal_id(*, workspace_id: int, table_id: int, schedule_id: int) -> str:
    """The Temporal Schedule id of a schedule row.

    >>> temporal_id(workspace_id=1, table_id=2, schedule_id=3)
    'schedule/ws1/t2/3'
    """
    return f"schedule/ws{workspace_id}/t{table_id}/{schedule_id}"


async def create_schedule(
    conn: Conn, *, workspace_id: int, table_id: int, name: str, spec: dict[str, Any], paused: bool
) -> dict[str, Any]:
    cur = await conn.execute(
        "INSERT INTO wds.schedules (workspace_id, table_id, name, spec, paused) VALUES (%s, %s, %s, %s, %s)"
        " RETURNING *",
        (workspace_id, table_id, name, Jsonb(spec), paused),
    )
    row = await cur.fetchone()
    assert row is not None
    return row


async def list_schedules(conn: Conn, *, workspace_id: int, table_id: int | None = None) -> list[dict[str, Any]]:
    """A workspace's schedules (of one table when ``table_id`` is given), oldest first."""
    if table_id is None:
        cur = await conn.execute("SELECT * FROM wds.schedules WHERE workspace_id = %s ORDER BY id", (workspace_id,))
    else:
        cur = await conn.execute(
            "SELECT * FROM wds.schedules WHERE workspace_id = %s AND table_id = %s ORDER BY id",
            (workspace_id, table_id),
        )
    return await cur.fetchall()


async def get_schedule(conn: Conn, *, workspace_id: int, schedule_id: int) -> dict[str, Any] | None:
    cur = await conn.execute(
        "SELECT * FROM wds.schedules WHERE workspace_id = %s AND id = %s", (workspace_id, schedule_id)
    )
    return await cur.fetchone()


async def update_schedule(
    conn: Conn, *, workspace_id: int, schedule_id: int, name: str | None = None,
    spec: dict[str, Any] | None = None, paused: bool | None = None,
) -> dict[str, Any] | None:
    """Change name, spec or paused (None keeps a value); the new row or None."""
    cur = await conn.execute(
        "UPDATE wds.schedules SET name = coalesce(%s, name), spec = coalesce(%s, spec),"
        " paused = coalesce(%s, paused) WHERE workspace_id = %s AND id = %s RETURNING *",
        (name, Jsonb(spec) if spec is not None else None, paused, workspace_id, schedule_id),
    )
    return await cur.fetchone()


async def delete_schedule(conn: Conn, *, workspace_id: int, schedule_id: int) -> dict[str, Any] | None:
    cur = await conn.execute(
        "DELETE FROM wds.schedules WHERE workspace_id = %s AND id = %s RETURNING *", (workspace_id, schedule_id)
    )
    return await cur.fetchone()
