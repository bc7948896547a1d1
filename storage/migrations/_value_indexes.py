"""Shared by the migrations that rebuild columns' value indexes in place (m0017, m0022):
each ``t_<t>_c_<c>`` of the columns a filter selects that is not of the form
:func:`storage.ddl.value_index_sql` makes now is dropped and made again. An index already
current, or missing, is left alone, so running it again changes nothing."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from psycopg import sql
from sqlalchemy import Connection, text

from storage import ddl
from storage.schema import ColumnMeta


def rebuild_value_indexes(conn: Connection, where: str, column: Callable[[Mapping[str, Any]], ColumnMeta | None]) -> None:
    """Rebuild the stale value indexes of the columns ``where`` selects (SQL over
    ``wds.columns c``); ``column`` describes one (its id, table id, type, value type) from
    its row (``c.id, c.table_id, c.type, c.value_type``), or None to skip it."""
    raw = conn.connection.driver_connection  # psycopg: composes the statements
    rows = conn.execute(text(
        "SELECT c.id, c.table_id, c.type, c.value_type, t.workspace_id, i.indexdef FROM wds.columns c"
        " JOIN wds.tables t ON t.id = c.table_id"
        " JOIN pg_indexes i ON i.schemaname = 'ws_' || t.workspace_id"
        "  AND i.indexname = 't_' || c.table_id || '_c_' || c.id"
        f" WHERE {where} ORDER BY c.id")).mappings().all()
    for r in rows:
        col = column(r)
        if col is None or ddl.value_index_is_current(r["indexdef"], col):
            continue
        schema = f"ws_{int(r['workspace_id'])}"
        conn.execute(text(sql.SQL("DROP INDEX {}.{}").format(
            sql.Identifier(schema), sql.Identifier(f"t_{col.table_id}_c_{col.id}")).as_string(raw)))
        conn.execute(text(ddl.value_index_sql(int(r["workspace_id"]), col, "btree").as_string(raw)))
