"""Realtime change capture, storage object keys and app users (issue 10).

* ``wds.capture_changes()``: the generic statement-level trigger function that copies
  changed rows into ``wds.events`` (seq from ``ws_<id>.event_seq``) and sends one
  ``pg_notify('wds_changes', '<workspace>:<first seq>:<last seq>')`` per statement; every
  existing workspace gets its sequence and every existing physical table its triggers
  (new ones get them from ``storage.ddl``).
* ``wds.event_horizon``: the highest seq purged per workspace by retention, so a client
  resuming from an older ``since`` is told it missed events instead of silently not.
* ``wds.app_users``: e-mail, password hash and the Users-table record of each app user
  (the hash never lives in a visible column); refresh tokens gain a rotation family.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

from storage.ddl import change_trigger_sql, event_seq_sql

CAPTURE_FUNCTION = r"""
CREATE OR REPLACE FUNCTION wds.capture_changes() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
  ws bigint := TG_ARGV[0]::bigint;
  tid bigint := TG_ARGV[1]::bigint;
  seq_name text := 'ws_' || TG_ARGV[0] || '.event_seq';
  hidden text[];
  first_seq bigint;
  last_seq bigint;
BEGIN
  -- internal columns (_pipeline, embeddings, ...) never leave the database in events
  SELECT coalesce(array_agg(attname::text), '{}') INTO hidden
    FROM pg_attribute
   WHERE attrelid = TG_RELID AND attnum > 0 AND NOT attisdropped AND attname LIKE '\_%';
  IF TG_OP = 'INSERT' THEN
    WITH ins AS (
      INSERT INTO wds.events (workspace_id, seq, table_id, event, record, old_record)
      SELECT ws, nextval(seq_name::regclass), tid, 'INSERT', to_jsonb(n) - hidden, NULL
        FROM (SELECT * FROM new_rows ORDER BY id) AS n
      RETURNING seq)
    SELECT min(seq), max(seq) INTO first_seq, last_seq FROM ins;
  ELSIF TG_OP = 'UPDATE' THEN
    WITH ins AS (
      INSERT INTO wds.events (workspace_id, seq, table_id, event, record, old_record)
      SELECT ws, nextval(seq_name::regclass), tid, 'UPDATE', to_jsonb(n) - hidden, to_jsonb(o) - hidden
        FROM (SELECT * FROM new_rows ORDER BY id) AS n JOIN old_rows AS o ON o.id = n.id
      RETURNING seq)
    SELECT min(seq), max(seq) INTO first_seq, last_seq FROM ins;
  ELSE
    WITH ins AS (
      INSERT INTO wds.events (workspace_id, seq, table_id, event, record, old_record)
      SELECT ws, nextval(seq_name::regclass), tid, 'DELETE', NULL, to_jsonb(o) - hidden
        FROM (SELECT * FROM old_rows ORDER BY id) AS o
      RETURNING seq)
    SELECT min(seq), max(seq) INTO first_seq, last_seq FROM ins;
  END IF;
  IF last_seq IS NOT NULL THEN
    -- small payload: consumers read the rows from wds.events (no 8000-byte NOTIFY limit)
    PERFORM pg_notify('wds_changes', ws::text || ':' || first_seq::text || ':' || last_seq::text);
  END IF;
  RETURN NULL;
END
$fn$
"""


def upgrade(conn: Connection) -> None:
    conn.execute(text(CAPTURE_FUNCTION))
    # retention scans by time; a BRIN index costs writers almost nothing (events arrive in
    # time order), unlike the b-tree m0001 created
    conn.execute(text("DROP INDEX IF EXISTS wds.events_time"))
    conn.execute(text("CREATE INDEX IF NOT EXISTS events_time_brin ON wds.events USING brin (created_at)"))
    conn.execute(
        text(
            "CREATE TABLE IF NOT EXISTS wds.event_horizon ("
            " workspace_id bigint PRIMARY KEY, purged_through bigint NOT NULL DEFAULT 0)"
        )
    )
    conn.execute(
        text(
            "CREATE TABLE IF NOT EXISTS wds.app_users ("
            " id bigserial PRIMARY KEY,"
            " workspace_id bigint NOT NULL REFERENCES wds.workspaces (id) ON DELETE CASCADE,"
            " table_id bigint NOT NULL,"
            " record_id bigint NOT NULL,"
            " email text NOT NULL,"
            " password_hash text NOT NULL,"
            " created_at timestamptz NOT NULL DEFAULT now(),"
            " UNIQUE (workspace_id, email))"
        )
    )
    conn.execute(text("ALTER TABLE wds.app_refresh_tokens ADD COLUMN IF NOT EXISTS family_id text"))
    conn.execute(
        text("CREATE INDEX IF NOT EXISTS app_refresh_family ON wds.app_refresh_tokens (family_id)")
    )
    conn.execute(text("CREATE INDEX IF NOT EXISTS objects_ws ON wds.objects (workspace_id)"))
    for (ws_id,) in conn.execute(text("SELECT id FROM wds.workspaces ORDER BY id")).all():
        exists = conn.execute(
            text("SELECT 1 FROM pg_namespace WHERE nspname = :n"), {"n": f"ws_{int(ws_id)}"}
        ).first()
        if exists:
            conn.execute(text(event_seq_sql(ws_id)))
    tables = conn.execute(
        text(
            "SELECT t.workspace_id, t.id FROM wds.tables t"
            " WHERE to_regclass(format('%I.%I', 'ws_' || t.workspace_id, 't_' || t.id)) IS NOT NULL"
            " ORDER BY t.id"
        )
    ).all()
    for ws_id, table_id in tables:
        for statement in change_trigger_sql(ws_id, table_id):
            conn.execute(text(statement))
