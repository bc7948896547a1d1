"""Backfills (issue #21): a run remembers the computed columns it recomputes.

``wds.runs.column_ids`` (jsonb list of column ids, null for other runs): when a newer
schema change starts a backfill of the same table, it takes over the columns of the one
still running (which ends ``superseded``). An index finds a table's running backfill.
"""

from __future__ import annotations

from sqlalchemy import Connection, text


def upgrade(conn: Connection) -> None:
    conn.execute(text("ALTER TABLE wds.runs ADD COLUMN IF NOT EXISTS column_ids jsonb"))
    conn.execute(text(
        "CREATE INDEX IF NOT EXISTS runs_running_backfill ON wds.runs (table_id)"
        " WHERE kind = 'backfill' AND status = 'running'"
    ))
