"""Deep pages by offset at the cost of page one (issue #24): the row counter keeps its
counts per block of ids.

``wds.row_counts`` (m0013) held one signed delta per INSERT/DELETE statement and a table's
count was their sum. Each delta is now split by id range at two granularities:

* ``shift`` 16: the rows whose ``id >> 16`` is ``block`` (65,536 ids: a *superblock*);
* ``shift`` 10: the rows whose ``id >> 10`` is ``block`` (1,024 ids).

A table's count is the sum of its ``shift`` 16 rows (existing rows, and any written
without the new columns, default to ``shift`` 16 with no block: they count, but give no
position). An unfiltered page ordered by id at offset N then finds the N-th row without
reading the N rows before it (:func:`storage.query.build.rank_start`): the superblocks'
running sum names the superblock holding it, its at most 64 blocks' running sum the
block, and at most 1,023 index entries of that block are skipped. At a million rows that
is about 16 + 64 counter rows, at a hundred million about 1,530 + 64.

The trigger writes a statement within one block (a single row, most batches) as two rows
without aggregating, and folds only the blocks its own statement touched, about every
16th statement: a fold never reads the whole table's counter. Every existing
table is recounted here (``wds.recount_rows``: the table locked against writes while its
blocks are counted, as m0013 did for its totals).
"""

from __future__ import annotations

from sqlalchemy import Connection, text

COUNT_FUNCTION = """
CREATE OR REPLACE FUNCTION wds.count_rows() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
  ws bigint := TG_ARGV[0]::bigint;
  tid bigint := TG_ARGV[1]::bigint;
  k bigint;
  lo bigint;
  hi bigint;
  shifts smallint[];
  blocks bigint[];
  fold boolean;
BEGIN
  -- new rows per statement, never an UPDATE of a shared one: concurrent writers of one
  -- table never wait for each other's commit
  IF TG_OP = 'INSERT' THEN
    SELECT count(*), min(id), max(id) INTO k, lo, hi FROM new_rows;
  ELSE
    SELECT -count(*), min(id), max(id) INTO k, lo, hi FROM old_rows;
  END IF;
  IF k = 0 THEN
    RETURN NULL;
  END IF;
  IF lo >> 10 = hi >> 10 THEN
    -- one block (a single row, most batches): its row and its superblock's
    INSERT INTO wds.row_counts (workspace_id, table_id, shift, block, n)
    VALUES (ws, tid, 16, lo >> 16, k), (ws, tid, 10, lo >> 10, k);
    IF currval('wds.row_counts_id_seq'::regclass) % 32 > 1 THEN
      RETURN NULL;
    END IF;
    shifts := ARRAY[16, 10];
    blocks := ARRAY[lo >> 16, lo >> 10];
  ELSE
    IF TG_OP = 'INSERT' THEN
      WITH added AS (
        INSERT INTO wds.row_counts (workspace_id, table_id, shift, block, n)
        SELECT ws, tid, s.shift, r.id >> s.shift, count(*)
        FROM new_rows AS r CROSS JOIN (VALUES (10::smallint), (16::smallint)) AS s (shift)
        GROUP BY s.shift, r.id >> s.shift
        RETURNING id, shift, block)
      SELECT array_agg(shift), array_agg(block), bool_or(id % 32 < 2) INTO shifts, blocks, fold FROM added;
    ELSE
      WITH added AS (
        INSERT INTO wds.row_counts (workspace_id, table_id, shift, block, n)
        SELECT ws, tid, s.shift, r.id >> s.shift, -count(*)
        FROM old_rows AS r CROSS JOIN (VALUES (10::smallint), (16::smallint)) AS s (shift)
        GROUP BY s.shift, r.id >> s.shift
        RETURNING id, shift, block)
      SELECT array_agg(shift), array_agg(block), bool_or(id % 32 < 2) INTO shifts, blocks, fold FROM added;
    END IF;
    IF NOT fold THEN
      RETURN NULL;
    END IF;
  END IF;
  -- about every 16th statement: fold the committed deltas of the blocks this statement
  -- touched (and its own) into one row per block; rows another transaction is folding
  -- are skipped, never waited for. A fold reads those blocks' rows, never the table's.
  WITH gone AS (
    DELETE FROM wds.row_counts WHERE id IN (
      SELECT c.id FROM wds.row_counts AS c
      JOIN unnest(shifts, blocks) AS u (shift, block) ON c.shift = u.shift AND c.block = u.block
      WHERE c.table_id = tid AND c.workspace_id = ws
      FOR UPDATE OF c SKIP LOCKED)
    RETURNING shift, block, n)
  INSERT INTO wds.row_counts (workspace_id, table_id, shift, block, n)
  SELECT ws, tid, shift, block, sum(n) FROM gone GROUP BY shift, block HAVING sum(n) <> 0;
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
  DELETE FROM wds.row_counts WHERE table_id = tid;
  EXECUTE format(
    'INSERT INTO wds.row_counts (workspace_id, table_id, shift, block, n)'
    ' SELECT $1, $2, s.shift, r.id >> s.shift, count(*) FROM %I.%I AS r'
    ' CROSS JOIN (VALUES (10::smallint), (16::smallint)) AS s (shift) GROUP BY s.shift, r.id >> s.shift',
    'ws_' || ws, 't_' || tid) USING ws, tid;
  SELECT coalesce(sum(n), 0) INTO total FROM wds.row_counts WHERE table_id = tid AND shift = 16;
  -- the table's base row: a table without any counter row is counted with count(*)
  INSERT INTO wds.row_counts (workspace_id, table_id, shift, block, n) VALUES (ws, tid, 16, 0, 0);
  RETURN total;
END
$fn$
"""


def upgrade(conn: Connection) -> None:
    conn.execute(text(
        "ALTER TABLE wds.row_counts ADD COLUMN IF NOT EXISTS shift smallint NOT NULL DEFAULT 16,"
        " ADD COLUMN IF NOT EXISTS block bigint"))
    # the counter's reads: a table's superblocks, or one superblock's blocks, in order
    conn.execute(text(
        "CREATE INDEX IF NOT EXISTS row_counts_rank ON wds.row_counts (table_id, shift, block) INCLUDE (n)"))
    conn.execute(text("DROP INDEX IF EXISTS wds.row_counts_table"))
    conn.execute(text(COUNT_FUNCTION))
    conn.execute(text(RECOUNT_FUNCTION))
    tables = conn.execute(text(
        "SELECT t.workspace_id, t.id FROM wds.tables t"
        " WHERE to_regclass(format('%I.%I', 'ws_' || t.workspace_id, 't_' || t.id)) IS NOT NULL"
        " ORDER BY t.id")).all()
    for ws_id, table_id in tables:
        conn.execute(text("SELECT wds.recount_rows(:ws, :t)"), {"ws": int(ws_id), "t": int(table_id)})
