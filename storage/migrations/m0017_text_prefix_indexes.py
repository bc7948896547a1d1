"""A data text column's btree holds ``(left(value, 200), id)`` (docs/decisions.md, "Long
text in data text columns").

Since m0015 each text column's btree was ``(value, id)``: a btree entry must stay under
~2.7 kB, so a text of a few thousand incompressible characters could not be written at
all. Every existing ``t_<t>_c_<c>`` of a text column that is not of the new form is
rebuilt in place (as m0015 did; large deployments may pre-create the new index
``CONCURRENTLY`` under another name and swap, docs/operations.md "Scale"). Running it
again changes nothing: an index already of the new form, or missing, is left alone.
"""

from __future__ import annotations

from psycopg import sql
from sqlalchemy import Connection, text

from storage import ddl
from storage.schema import ColumnMeta, ColumnType


def upgrade(conn: Connection) -> None:
    raw = conn.connection.driver_connection  # psycopg: composes the statement
    rows = conn.execute(text(
        "SELECT c.id, c.table_id, t.workspace_id, i.indexdef FROM wds.columns c"
        " JOIN wds.tables t ON t.id = c.table_id"
        " JOIN pg_indexes i ON i.schemaname = 'ws_' || t.workspace_id"
        "  AND i.indexname = 't_' || c.table_id || '_c_' || c.id"
        " WHERE c.type = 'text' ORDER BY c.id")).mappings().all()
    for r in rows:
        col = ColumnMeta(id=int(r["id"]), table_id=int(r["table_id"]), name="", type=ColumnType.TEXT)
        if ddl.value_index_is_current(r["indexdef"], col):
            continue
        schema = f"ws_{int(r['workspace_id'])}"
        conn.execute(text(sql.SQL("DROP INDEX {}.{}").format(
            sql.Identifier(schema), sql.Identifier(f"t_{col.table_id}_c_{col.id}")).as_string(raw)))
        conn.execute(text(ddl.value_index_sql(int(r["workspace_id"]), col, "btree").as_string(raw)))
