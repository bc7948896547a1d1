"""Contains search and affordable counts at scale (issue #24).

* ``pg_trgm`` (shipped with the embedded PostgreSQL and the pgvector image's contrib) is
  created in the default schema, beside ``vector``; every existing stored text column
  gets its GIN trigram index ``t_<t>_c_<c>_trgm`` (new ones get it from ``storage.ddl``).
  The indexes are built here without ``CONCURRENTLY`` (a migration runs in one
  transaction): writes to each table wait while its index is built. A large deployment
  pre-creates them beforehand with ``CREATE INDEX CONCURRENTLY IF NOT EXISTS`` (names and
  form: :func:`storage.ddl.trigram_index_sql`; docs/operations.md, "Scale"), which this
  migration then finds in place.
* ``wds.row_counts`` and ``wds.count_rows()``: the row counter of every physical table,
  kept by statement-level INSERT/DELETE triggers with transition tables; every existing
  table gets its triggers and a base row holding its current count. Creating a trigger
  locks the table against writes until this transaction commits, so the count taken
  after it is exact.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

from storage.ddl import count_seed_sql, count_trigger_sql, trigram_index_sql

COUNT_FUNCTION = """
CREATE OR REPLACE FUNCTION wds.count_rows() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
  ws bigint := TG_ARGV[0]::bigint;
  tid bigint := TG_ARGV[1]::bigint;
  delta bigint;
  slot bigint;
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT count(*) INTO delta FROM new_rows;
  ELSE
    SELECT -count(*) INTO delta FROM old_rows;
  END IF;
  IF delta = 0 THEN
    RETURN NULL;
  END IF;
  -- a new row per statement, never an UPDATE of a shared one: concurrent writers of one
  -- table never wait for each other's commit
  INSERT INTO wds.row_counts (workspace_id, table_id, n) VALUES (ws, tid, delta) RETURNING id INTO slot;
  IF slot % 32 = 0 THEN
    -- fold the table's committed deltas (and this one) into one row; rows another
    -- transaction is folding are skipped, never waited for
    WITH gone AS (
      DELETE FROM wds.row_counts WHERE id IN (
        SELECT id FROM wds.row_counts WHERE table_id = tid AND workspace_id = ws FOR UPDATE SKIP LOCKED)
      RETURNING n)
    INSERT INTO wds.row_counts (workspace_id, table_id, n)
    SELECT ws, tid, sum(n) FROM gone HAVING count(*) > 0;
  END IF;
  RETURN NULL;
END
$fn$
"""

RECOUNT_FUNCTION = """
CREATE OR REPLACE FUNCTION wds.recount_rows(ws bigint, tid bigint) RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  total bigint;
BEGIN
  -- for operators after a load with the table's triggers disabled; the lock keeps
  -- writers out until the caller's transaction commits
  EXECUTE format('LOCK TABLE %I.%I IN SHARE MODE', 'ws_' || ws, 't_' || tid);
  EXECUTE format('SELECT count(*) FROM %I.%I', 'ws_' || ws, 't_' || tid) INTO total;
  DELETE FROM wds.row_counts WHERE table_id = tid;
  INSERT INTO wds.row_counts (workspace_id, table_id, n) VALUES (ws, tid, total);
  RETURN total;
END
$fn$
"""


def upgrade(conn: Connection) -> None:
    conn.execute(text("CREATE EXTENSION IF NOT EXISTS pg_trgm"))
    conn.execute(
        text(
            "CREATE TABLE IF NOT EXISTS wds.row_counts ("
            " id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
            " workspace_id bigint NOT NULL, table_id bigint NOT NULL, n bigint NOT NULL)"
        )
    )
    conn.execute(text("CREATE INDEX IF NOT EXISTS row_counts_table ON wds.row_counts (table_id)"))
    conn.execute(text("CREATE INDEX IF NOT EXISTS row_counts_ws ON wds.row_counts (workspace_id)"))
    conn.execute(text(COUNT_FUNCTION))
    conn.execute(text(RECOUNT_FUNCTION))
    tables = conn.execute(
        text(
            "SELECT t.workspace_id, t.id FROM wds.tables t"
            " WHERE to_regclass(format('%I.%I', 'ws_' || t.workspace_id, 't_' || t.id)) IS NOT NULL"
            " ORDER BY t.id"
        )
    ).all()
    raw = conn.connection.driver_connection  # psycopg: composes the index statements
    for ws_id, table_id in tables:
        for statement in count_trigger_sql(ws_id, table_id):
            conn.execute(text(statement))
        rows = conn.execute(text(f"SELECT count(*) FROM ws_{int(ws_id)}.t_{int(table_id)}")).scalar_one()
        conn.execute(text(f"DELETE FROM wds.row_counts WHERE table_id = {int(table_id)}"))
        conn.execute(text(count_seed_sql(ws_id, table_id, int(rows))))
    text_columns = conn.execute(
        text(
            "SELECT c.workspace_id, c.table_id, c.id FROM wds.columns c"
            " WHERE c.type = 'text'"
            " AND to_regclass(format('%I.%I', 'ws_' || c.workspace_id, 't_' || c.table_id)) IS NOT NULL"
            " AND EXISTS (SELECT 1 FROM pg_attribute a"
            "  WHERE a.attrelid = to_regclass(format('%I.%I', 'ws_' || c.workspace_id, 't_' || c.table_id))"
            "  AND a.attname = 'c_' || c.id AND NOT a.attisdropped)"
            " ORDER BY c.id"
        )
    ).all()
    for ws_id, table_id, column_id in text_columns:
        conn.execute(text(trigram_index_sql(ws_id, table_id, column_id).as_string(raw)))
