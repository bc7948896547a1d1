"""Bulk runs and their progress (``wds.runs``)."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

Conn = AsyncConnection[Any]


async def create_run(conn: Conn, *, run_id: str, workspace_id: int, table_id: int, total: int,
                     workflow_id: str, kind: str = "run_actions") -> dict[str, Any]:
    cur = await conn.execute(
        "INSERT INTO wds.runs (id, workspace_id, table_id, kind, status, total, workflow_id)"
        " VALUES (%s, %s, %s, %s, 'running', %s, %s) RETURNING *",
        (run_id, workspace_id, table_id, kind, total, workflow_id),
    )
    row = await cur.fetchone()
    assert row is not None
    return row


async def get_run(conn: Conn, *, workspace_id: int, run_id: str) -> dict[str, Any] | None:
    cur = await conn.execute(
        "SELECT * FROM wds.runs WHERE id = %s AND workspace_id = %s", (run_id, workspace_id)
    )
    return await cur.fetchone()


async def set_progress(conn: Conn, *, run_id: str, done: int, failed: int, status: str | None) -> None:
    # progress only moves forward (a retried activity may report an older figure)
    await conn.execute(
        "UPDATE wds.runs SET done = greatest(done, %s), failed = greatest(failed, %s),"
        " status = coalesce(%s, status), updated_at = now() WHERE id = %s",
        (done, failed, status, run_id),
    )
