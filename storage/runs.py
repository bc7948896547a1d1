"""Bulk runs and their progress (``wds.runs``).

Statuses: ``running``; then exactly one of ``completed`` (every row succeeded),
``completed_with_errors`` (some rows failed: ``failed`` counts them, ``errors`` lists the
first ones), ``failed`` (nothing could run), ``cancelled`` or ``superseded`` (a newer
backfill of the same table took over). A schedule firing that does not run at all is
recorded directly as ``skipped`` (``errors.skipped`` says why). A final status is never
overwritten.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

Conn = AsyncConnection[Any]


async def create_run(conn: Conn, *, run_id: str, workspace_id: int, table_id: int, total: int,
                     workflow_id: str, kind: str = "run_actions",
                     column_ids: list[int] | None = None) -> dict[str, Any]:
    cur = await conn.execute(
        "INSERT INTO wds.runs (id, workspace_id, table_id, kind, status, total, workflow_id, column_ids)"
        " VALUES (%s, %s, %s, %s, 'running', %s, %s, %s) RETURNING *",
        (run_id, workspace_id, table_id, kind, total, workflow_id,
         Jsonb(column_ids) if column_ids is not None else None),
    )
    row = await cur.fetchone()
    assert row is not None
    return row


async def record_skipped(conn: Conn, *, run_id: str, workspace_id: int, table_id: int, workflow_id: str,
                         reason: str) -> None:
    """A schedule firing that touched nothing, and why (idempotent: activities retry)."""
    await conn.execute(
        "INSERT INTO wds.runs (id, workspace_id, table_id, kind, status, total, workflow_id, errors)"
        " VALUES (%s, %s, %s, 'schedule', 'skipped', 0, %s, jsonb_build_object('skipped', %s::text))"
        " ON CONFLICT (id) DO NOTHING",
        (run_id, workspace_id, table_id, workflow_id, reason),
    )


async def runs_by_id(conn: Conn, *, workspace_id: int, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Several runs of a workspace by id (a schedule's recent firings)."""
    if not run_ids:
        return {}
    cur = await conn.execute(
        "SELECT id, status, errors FROM wds.runs WHERE workspace_id = %s AND id = ANY(%s)", (workspace_id, run_ids)
    )
    return {r["id"]: r for r in await cur.fetchall()}


async def get_run(conn: Conn, *, workspace_id: int, run_id: str) -> dict[str, Any] | None:
    cur = await conn.execute(
        "SELECT * FROM wds.runs WHERE id = %s AND workspace_id = %s", (run_id, workspace_id)
    )
    return await cur.fetchone()


async def set_progress(conn: Conn, *, run_id: str, done: int, failed: int, status: str | None,
                       errors: dict[str, Any] | None = None) -> None:
    # progress only moves forward (a retried activity may report an older figure), and
    # only while the run is running: a final status stays with its figures (a superseded
    # run's chunks still in flight write nothing, storage.records.write_computed, so what
    # they report is not done; they made it read "superseded, done 50000/50000").
    # ``total`` was counted when the run started; a run paging the table also reaches rows
    # created since (a backfill must: a create that read the old formula may commit after
    # the count), so it grows to cover them rather than reading past 100 %
    await conn.execute(
        "UPDATE wds.runs SET done = greatest(done, %s), failed = greatest(failed, %s),"
        " total = greatest(total, greatest(done, %s) + greatest(failed, %s)),"
        " status = coalesce(%s, status),"
        " errors = coalesce(%s, errors), updated_at = now() WHERE id = %s AND status = 'running'",
        (done, failed, done, failed, status, Jsonb(errors) if errors is not None else None, run_id),
    )


async def running_backfill(conn: Conn, *, workspace_id: int, table_id: int) -> dict[str, Any] | None:
    """The table's backfill still running, if any (at most one: a new one supersedes it)."""
    cur = await conn.execute(
        "SELECT id, column_ids, workflow_id FROM wds.runs WHERE workspace_id = %s AND table_id = %s"
        " AND kind = 'backfill' AND status = 'running' ORDER BY created_at DESC LIMIT 1",
        (workspace_id, table_id),
    )
    return await cur.fetchone()


async def supersede(conn: Conn, *, run_id: str, by: str) -> None:
    """End a running backfill as ``superseded`` (its workflow is terminated by the caller)."""
    await conn.execute(
        "UPDATE wds.runs SET status = 'superseded', errors = jsonb_build_object('superseded_by', %s::text),"
        " updated_at = now() WHERE id = %s AND status = 'running'",
        (by, run_id),
    )


async def abandon(conn: Conn, *, run_id: str, previous: str | None, error: str) -> None:
    """A backfill whose workflow could not start: it ends ``failed``, and the run it was
    to supersede (``previous``) is running again (its workflow was never terminated)."""
    await conn.execute(
        "UPDATE wds.runs SET status = 'failed', errors = jsonb_build_object('error', %s::text), updated_at = now()"
        " WHERE id = %s",
        (error, run_id),
    )
    if previous is not None:
        await conn.execute(
            "UPDATE wds.runs SET status = 'running', errors = '{}'::jsonb, updated_at = now()"
            " WHERE id = %s AND status = 'superseded' AND errors->>'superseded_by' = %s",
            (previous, run_id),
        )
