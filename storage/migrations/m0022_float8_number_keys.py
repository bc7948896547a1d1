"""A number-typed computed column's btree is keyed by its value as a double (``float8``),
as a data number column's is, instead of ``numeric`` (docs/decisions.md, "Typed computed
values").

Every existing ``t_<t>_c_<c>`` of a computed column of value type ``number`` that is not
of the new form (storage/ddl.py ``value_index_is_current``) is rebuilt in place, as m0017
did for text (large deployments may pre-create the new index ``CONCURRENTLY`` under
another name and swap, docs/operations.md "Scale"). The cells are not touched: a stored
number no double holds reads as blank through the new key, as it did not fit before
either. Running it again changes nothing: an index already of the new form, or missing,
is left alone.
"""

from __future__ import annotations

from psycopg import sql
from sqlalchemy import Connection, text

from storage import ddl
from storage.schema import ColumnMeta, ColumnType


def upgrade(conn: Connection) -> None:
    raw = conn.connection.driver_connection  # psycopg: composes the statement
    rows = conn.execute(text(
        "SELECT c.id, c.table_id, c.type, t.workspace_id, i.indexdef FROM wds.columns c"
        " JOIN wds.tables t ON t.id = c.table_id"
        " JOIN pg_indexes i ON i.schemaname = 'ws_' || t.workspace_id"
        "  AND i.indexname = 't_' || c.table_id || '_c_' || c.id"
        " WHERE c.value_type = 'number' ORDER BY c.id")).mappings().all()
    for r in rows:
        kind = ColumnType(r["type"])
        if not kind.computed:
            continue
        col = ColumnMeta(id=int(r["id"]), table_id=int(r["table_id"]), name="", type=kind, value_type="number")
        if ddl.value_index_is_current(r["indexdef"], col):
            continue
        schema = f"ws_{int(r['workspace_id'])}"
        conn.execute(text(sql.SQL("DROP INDEX {}.{}").format(
            sql.Identifier(schema), sql.Identifier(f"t_{col.table_id}_c_{col.id}")).as_string(raw)))
        conn.execute(text(ddl.value_index_sql(int(r["workspace_id"]), col, "btree").as_string(raw)))
