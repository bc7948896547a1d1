"""Whether given rows match planned filters, decided by PostgreSQL (realtime subscriptions).

A realtime subscription's filter must select exactly the records a list with the same
filter selects. Rather than a second evaluator in Python (which disagreed: Unicode case
folding, JSON numbers, collation), the rows of a change — ``to_jsonb`` of the physical
row, as the capture trigger stores it in ``wds.events`` — are turned back into the
table's row type with ``jsonb_populate_record`` and run through the WHERE clause
:func:`storage.query.build.build_where` writes for a list. One statement answers every
(row, filter set) pair of a table, reading the rows where they are stored::

    SELECT src.k, src.side, ARRAY[(<where 1>) IS TRUE, (<where 2>) IS TRUE, ...]
    FROM (SELECT ev.seq, s.side, s.rec FROM wds.events ev, (VALUES (0, ev.record),
          (1, ev.old_record)) AS s(side, rec) WHERE ...) AS src(k, side, rec),
         jsonb_populate_record(NULL::ws_<w>.t_<t>, src.rec) AS t
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from storage.query.build import TABLE_ALIAS, _table, build_where
from storage.query.plan import PlannedFilter, PlannedGroup
from storage.schema import TableMeta

FilterSet = tuple[PlannedFilter | PlannedGroup, ...]


ROWS = sql.SQL("SELECT i, 0, rec FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS e(rec, i)")
"""A source of rows: a jsonb array of ``to_jsonb`` rows (its parameter), keyed by position."""

EVENTS = sql.SQL(
    "SELECT ev.seq, s.side, s.rec FROM wds.events ev"
    " CROSS JOIN LATERAL (VALUES (0, ev.record), (1, ev.old_record)) AS s(side, rec)"
    " WHERE ev.workspace_id = %s AND ev.table_id = %s AND ev.seq = ANY(%s) AND s.rec IS NOT NULL")
"""A source of rows: stored change events (workspace, table, seqs), keyed by seq, each side
(record, then old record) a row."""


def build_verdicts(table: TableMeta, filter_sets: Sequence[FilterSet],
                   source: sql.Composable = ROWS) -> tuple[sql.Composed, list[Any]]:
    """The statement of the module docstring over ``source`` (:data:`ROWS` or
    :data:`EVENTS`, whose parameters come after the returned ones): rows ``(key, side,
    verdicts)`` in key and side order."""
    conds: list[sql.Composable] = []
    params: list[Any] = []
    for filters in filter_sets:
        where, p = build_where(filters)
        conds.append(sql.SQL("({}) IS TRUE").format(where))
        params.extend(p)
    # only the columns the filters read are turned back into the row type: a value stored
    # before its column was converted (with allow_loss) that the new type cannot read
    # fails the cast, and must not keep every other filter from judging the event
    # (a literal, not a parameter: it sits after the source, whose parameters the caller appends)
    needed = sql.Literal(sorted(set().union(*(filter_columns(f) for f in filter_sets))))
    query = sql.SQL(
        "SELECT src.k, src.side, ARRAY[{conds}]::boolean[]"
        " FROM ({source}) AS src(k, side, rec)"
        " CROSS JOIN LATERAL jsonb_populate_record(NULL::{table},"
        " (SELECT coalesce(jsonb_object_agg(e.key, e.value), '{{}}') FROM jsonb_each(src.rec) AS e"
        " WHERE e.key = ANY({needed}::text[]))) AS {a}"
        " ORDER BY src.k, src.side"
    ).format(conds=sql.SQL(", ").join(conds), source=source, table=_table(table.workspace_id, table.id),
             needed=needed, a=sql.Identifier(TABLE_ALIAS))
    return query, params


def filter_columns(filters: Sequence[PlannedFilter | PlannedGroup]) -> set[str]:
    """The physical columns planned filters read (inside groups too)."""
    out: set[str] = set()
    for f in filters:
        out |= filter_columns(f.items) if isinstance(f, PlannedGroup) else {f.target.physical}
    return out


async def match_events(
    conn: psycopg.AsyncConnection[Any], table: TableMeta, filter_sets: Sequence[FilterSet],
    seqs: Sequence[int],
) -> dict[int, list[list[bool]]]:
    """For each stored change event of ``table`` (``wds.events``, by seq), whether each side
    (record, then old record, where present) matches each filter set: ``{seq: [[bool per
    set] per side]}``. The rows are read where they are stored, so an event cut for
    delivery is judged on its whole record. An event not found (purged) is absent."""
    if not seqs or not filter_sets:
        return {}
    query, params = build_verdicts(table, filter_sets, EVENTS)
    params.extend([table.workspace_id, table.id, list(seqs)])
    cur = conn.cursor(row_factory=tuple_row)
    await cur.execute(query, params)
    out: dict[int, list[list[bool]]] = {}
    for seq, _side, verdicts in await cur.fetchall():
        out.setdefault(int(seq), []).append([bool(v) for v in verdicts])
    return out
