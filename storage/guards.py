"""Write-back guards: a run stores a computed value only while what it was computed from
is still what the table holds.

A run reads its records, computes (for seconds, with an HTTP step), then writes. Meanwhile
another write may have changed the record's inputs and started its own run, and a schema
change may have edited the column and started a backfill. Written unconditionally, the
slower run's values land last and stay, computed from inputs or a formula the table no
longer has (issue: "trust in the data"). So every write-back is checked, column by column:

* **inputs**: the stored columns the value derives from in this run (the columns it reads,
  through the run's own computed columns, down to stored values: :func:`plan`) must hold
  what the run read. They are compared as a digest of their values (:func:`digest`),
  taken when the run loaded the rows and again, under the rows' locks, when it writes;
* **definition**: the column's own stored definition (type, formula and config in their
  stored by-id form, broken, value type: :func:`definition_of`, so a rename changes
  nothing) and the types of its inputs must be those of the run's snapshot.

A column failing either check is not written for that record, and the record's outcome is
not either (it describes a run whose values did not land). Who stores the right value then:

* inputs changed: the write that changed them ran the columns depending on them
  (``storage.pipelines.plan_steps``) from the new values; that run's own check passes,
  since nothing changed after it read. The last write's run always lands;
* definition changed: the schema change's backfill recomputes the column for every row,
  reading after the change committed. Its writes wait for a run's row locks, so it lands
  after the stale run, never before. But the backfill may already have passed the row,
  computing the column from an input this run then writes (a write's run, snapshot before
  a formula edit, stores ``F`` while its ``G`` is refused; the backfill stored ``G`` from the
  old ``F``). So a run whose values were refused for a definition evaluates those records
  again with the definitions the table has now (``activities.records_io``), where it can
  (formula and parser runs).

The check and the write run in one transaction that locks the rows first (``FOR NO KEY
UPDATE``, in id order) and reads the definitions after, so a schema change committing
between the two is seen, or its backfill's writes wait for this transaction to end.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from storage import ddl, meta
from storage.pipelines import graph
from storage.records import row_list
from storage.schema import ColumnType, TableMeta, column_name, definition_of

Update = tuple[int, dict[int, Any], dict[str, Any] | None]


def digest(row: Mapping[str, Any], physicals: Sequence[str]) -> str:
    """A digest of a stored row's values of ``physicals`` (as psycopg reads them: the same
    stored values read twice give the same text)."""
    return hashlib.blake2b(repr([row.get(p) for p in physicals]).encode(), digest_size=8).hexdigest()


def plan(table: TableMeta, run: Iterable[int]) -> dict[str, Any]:
    """Which stored columns each computed column of a run (``run``: its column ids) derives
    from: ``{"sets": [[physical, ...], ...], "cols": {column id: set index}}``."""
    reads = graph(table).reads
    run_set = set(run)
    known = {c.id for c in table.columns}
    memo: dict[int, frozenset[int]] = {}

    def inputs(cid: int, path: frozenset[int]) -> frozenset[int]:
        found = memo.get(cid)
        if found is not None:
            return found
        out: set[int] = set()
        for ref in reads.get(cid, ()):
            if ref in run_set:
                if ref not in path:  # a cycle (refused at write time): stop there
                    out |= inputs(ref, path | {ref})
            elif ref in known:
                out.add(ref)
        memo[cid] = frozenset(out)
        return memo[cid]

    sets: list[list[str]] = []
    index: dict[tuple[str, ...], int] = {}
    cols: dict[str, int] = {}
    for cid in sorted(run_set):
        key = tuple(sorted(column_name(i) for i in inputs(cid, frozenset({cid}))))
        if key not in index:
            index[key] = len(sets)
            sets.append(list(key))
        cols[str(cid)] = index[key]
    return {"sets": sets, "cols": cols}


def stamp(guard: Mapping[str, Any], rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``guard`` (:func:`plan`) with each row's digests as read: ``rows`` record id → one
    digest per input set."""
    return {**guard, "rows": {str(r["id"]): [digest(r, s) for s in guard["sets"]] for r in rows}}


async def as_stored(conn: psycopg.AsyncConnection[Any], table: TableMeta) -> TableMeta:
    """``table`` (a run's snapshot) as its rows are stored now, to read them: without the
    columns deleted since, and each column converted since (``PATCH`` of its type) with its
    type now. A read composed from the snapshot's types would fail on a converted column
    (a function or cast of the old type) or, worse, read it as the old type. The check
    itself still compares the snapshot's types: a value computed from a converted input
    does not land."""
    changed = await meta.changed_columns(conn, table_id=table.id, types={c.id: c.type.value for c in table.columns})
    if not changed:
        return table
    return dataclasses.replace(table, memo={}, columns=tuple(
        dataclasses.replace(c, type=ColumnType(now)) if (now := changed.get(c.id, c.type.value)) != c.type.value else c
        for c in table.columns if c.id not in changed or changed[c.id] is not None))


@dataclass
class Checked:
    """What :func:`check` keeps of a write-back and why it left the rest out."""

    kept: list[Update]  # the values to write
    current: dict[int, dict[str, Any]]  # the rows as they are now (locked), by id
    moved: set[int] = field(default_factory=set)  # records with a value whose inputs changed
    redefined: set[int] = field(default_factory=set)  # records with a value whose column's definition changed


async def check(
    conn: psycopg.AsyncConnection[Any], table: TableMeta, updates: list[Update], stamped: Mapping[str, Any],
    *, stored: bool = False,
) -> Checked:
    """Lock the rows of ``updates`` and keep of each only the values whose inputs and
    definition are unchanged (see the module docstring); run inside the transaction that
    then writes them. A record gone is left out whole (and not reported). A record's
    outcome is kept only with all its values.

    The rows are locked and read by ``table``'s types, or with ``stored`` by the types they
    are stored with now (:func:`as_stored`, one statement more): for a write-back whose
    first try failed because a column was converted since the run's snapshot."""
    ids = sorted({rid for rid, _, _ in updates})
    cur = await conn.execute(
        sql.SQL("SELECT {} FROM {} WHERE id = ANY(%s) ORDER BY id FOR NO KEY UPDATE").format(
            row_list(await as_stored(conn, table) if stored else table), ddl.qualified(table.workspace_id, table.id)),
        (ids,))
    out = Checked([], {row["id"]: row for row in await cur.fetchall()})
    written = {cid for _, values, _ in updates for cid in values}
    snap = {c.id: c for c in table.columns}
    sets: list[list[str]] = stamped.get("sets", [])
    cols: dict[str, int] = stamped.get("cols", {})
    input_ids = {int(p[2:]) for s in sets for p in s}
    cur = await conn.execute("SELECT id, type, formula, config, broken, value_type FROM wds.columns"
                             " WHERE id = ANY(%s)", (sorted(written | input_ids),))
    defs = {row["id"]: row for row in await cur.fetchall()}

    def input_types_hold(s: int) -> bool:
        for p in sets[s]:
            cid = int(p[2:])
            now, then = defs.get(cid), snap.get(cid)
            if now is None or then is None or now["type"] != then.type.value:
                return False
        return True

    types_hold = [input_types_hold(s) for s in range(len(sets))]
    # a value lands only in a column computed now, by the definition the run computed it with
    defined = {cid for cid in written
               if cid in defs and cid in snap and ColumnType(defs[cid]["type"]).computed
               and (not snap[cid].definition or definition_of(defs[cid]) == snap[cid].definition)}
    rows: dict[str, list[str]] = stamped.get("rows", {})
    for rid, values, outcome in updates:
        row = out.current.get(rid)
        if row is None:
            continue
        if not values:
            out.kept.append((rid, values, outcome))
            continue
        read = rows.get(str(rid))
        ok: dict[int, Any] = {}
        for cid, value in values.items():
            s = cols.get(str(cid))
            if cid not in defined:
                out.redefined.add(rid)
            elif s is not None and read is not None and not (types_hold[s] and digest(row, sets[s]) == read[s]):
                (out.moved if types_hold[s] else out.redefined).add(rid)
            else:
                ok[cid] = value
        if ok:
            out.kept.append((rid, ok, outcome if len(ok) == len(values) else None))
    return out
