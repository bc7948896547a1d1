"""Whether given rows match planned filters, decided by PostgreSQL (realtime subscriptions).

A realtime subscription's filter must select exactly the records a list with the same
filter selects. Rather than a second evaluator in Python (which disagreed: Unicode case
folding, JSON numbers, collation), the rows of a change — ``to_jsonb`` of the physical
row, as the capture trigger stores it in ``wds.events`` — are turned back into the
table's row type with ``jsonb_populate_record`` and run through the WHERE clause
:func:`storage.query.build.build_where` writes for a list. One statement answers every
(row, filter set) pair of a table::

    SELECT e.i, ARRAY[(<where 1>) IS TRUE, (<where 2>) IS TRUE, ...]
    FROM jsonb_array_elements(%s) WITH ORDINALITY AS e(rec, i),
         jsonb_populate_record(NULL::ws_<w>.t_<t>, e.rec) AS t
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from storage.query.build import TABLE_ALIAS, _table, build_where
from storage.query.plan import PlannedFilter, PlannedGroup
from storage.schema import TableMeta

FilterSet = tuple[PlannedFilter | PlannedGroup, ...]


def build_verdicts(table: TableMeta, filter_sets: Sequence[FilterSet]) -> tuple[sql.Composed, list[Any]]:
    """The statement of the module docstring; its last parameter is the rows' jsonb array."""
    conds: list[sql.Composable] = []
    params: list[Any] = []
    for filters in filter_sets:
        where, p = build_where(filters)
        conds.append(sql.SQL("({}) IS TRUE").format(where))
        params.extend(p)
    query = sql.SQL(
        "SELECT e.i, ARRAY[{conds}]::boolean[]"
        " FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS e(rec, i)"
        " CROSS JOIN LATERAL jsonb_populate_record(NULL::{table}, e.rec) AS {a}"
        " ORDER BY e.i"
    ).format(conds=sql.SQL(", ").join(conds), table=_table(table.workspace_id, table.id),
             a=sql.Identifier(TABLE_ALIAS))
    return query, params


async def match_rows(
    conn: psycopg.AsyncConnection[Any], table: TableMeta, filter_sets: Sequence[FilterSet],
    rows: Sequence[dict[str, Any]],
) -> list[list[bool]]:
    """For each row (a ``to_jsonb`` of the table's physical row), whether it matches each
    filter set: ``result[row][set]``. An empty filter set matches every row."""
    if not rows or not filter_sets:
        return [[True] * len(filter_sets) for _ in rows]
    query, params = build_verdicts(table, filter_sets)
    params.append(Jsonb(list(rows)))
    cur = conn.cursor(row_factory=tuple_row)
    await cur.execute(query, params)
    out: list[list[bool]] = [[False] * len(filter_sets) for _ in rows]
    for i, verdicts in await cur.fetchall():
        out[int(i) - 1] = [bool(v) for v in verdicts]
    return out
