"""Computed columns get a value type and the indexes of a data column of that type
(issue 24 item 1; docs/decisions.md, "Typed computed values").

``wds.columns.value_type`` is added; every computed column without one gets the type
:func:`storage.valuetype.value_type_of` gives it (a formula's inferred from its syntax
tree). A scalar type is kept only when every value already stored fits it (else the
column stays ``json``: nothing is lost, nothing reads differently); such a column gets
its ``(typed value, id)`` btree and, for text, its trigram index. ``wds.json_instant``
(the typed value of a date) is created. Running it again changes nothing: columns that
have a value type are skipped and the indexes are made only when missing.
"""

from __future__ import annotations

from typing import Any

from psycopg import sql
from sqlalchemy import Connection, text

from storage import ddl, valuetype
from storage.schema import SCALAR_VALUE_TYPES, ColumnMeta, ColumnType


def _fits(conn: Connection, raw: Any, ws_id: int, col: ColumnMeta, value_type: str) -> bool:
    """Whether every stored value of ``col`` is blank or of ``value_type``."""
    c = sql.Identifier(col.physical)
    query = sql.SQL("SELECT 1 FROM {} WHERE {} IS NOT NULL AND {} <> 'null'::jsonb AND {} IS NULL LIMIT 1").format(
        sql.SQL("{}.{}").format(sql.Identifier(f"ws_{int(ws_id)}"), sql.Identifier(f"t_{col.table_id}")),
        c, c, ddl.computed_value_expr(c, value_type),
    )
    return conn.execute(text(query.as_string(raw))).first() is None


def upgrade(conn: Connection) -> None:
    conn.execute(text("ALTER TABLE wds.columns ADD COLUMN IF NOT EXISTS value_type text"))
    conn.exec_driver_sql(ddl.INSTANT_FUNCTION_SQL)
    raw = conn.connection.driver_connection  # psycopg: composes the statements
    trigrams = conn.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'")).first() is not None
    rows = conn.execute(text(
        "SELECT c.id, c.table_id, c.workspace_id, c.name, c.type, c.formula, c.config, c.value_type"
        " FROM wds.columns c"
        " WHERE to_regclass(format('%I.%I', 'ws_' || c.workspace_id, 't_' || c.table_id)) IS NOT NULL"
        " ORDER BY c.table_id, c.id"
    )).mappings().all()
    # what each table's formulas read: stored references are "@<id>"
    known: dict[int, dict[str, tuple[str, str | None]]] = {}
    for r in rows:
        known.setdefault(r["table_id"], {})[f"@{r['id']}"] = (r["type"], r["value_type"])
    for r in rows:
        kind = ColumnType(r["type"])
        if not kind.computed or r["value_type"] is not None:
            continue
        config = r["config"] or {}
        value_type = valuetype.value_type_of(kind, r["formula"], config, valuetype.field_types(known[r["table_id"]]))
        col = ColumnMeta(id=r["id"], table_id=r["table_id"], name=r["name"], type=kind, value_type=value_type)
        if value_type in SCALAR_VALUE_TYPES and not _exists(conn, r["workspace_id"], col):
            value_type = "json"  # the physical column is missing: nothing to index
        if value_type in SCALAR_VALUE_TYPES and not _fits(conn, raw, r["workspace_id"], col, value_type):
            value_type = "json"
        col = ColumnMeta(id=r["id"], table_id=r["table_id"], name=r["name"], type=kind, value_type=value_type)
        if value_type in SCALAR_VALUE_TYPES:
            schema = f"ws_{int(r['workspace_id'])}"
            index = f"t_{int(r['table_id'])}_c_{int(r['id'])}"
            conn.execute(text(f'DROP INDEX IF EXISTS "{schema}"."{index}"'))
            conn.execute(text(ddl.value_index_sql(r["workspace_id"], col, "btree").as_string(raw)))
            if value_type == "text" and trigrams:
                conn.execute(text(f'DROP INDEX IF EXISTS "{schema}"."{ddl.trigram_index_name(col.table_id, col.id)}"'))
                conn.execute(text(
                    ddl.trigram_index_sql(r["workspace_id"], col.table_id, col.id, computed=True).as_string(raw)))
        conn.execute(text("UPDATE wds.columns SET value_type = :v WHERE id = :id"), {"v": value_type, "id": r["id"]})
        known[r["table_id"]][f"@{r['id']}"] = (r["type"], value_type)


def _exists(conn: Connection, ws_id: int, col: ColumnMeta) -> bool:
    return conn.execute(text(
        "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(:t) AND attname = :c AND NOT attisdropped"
    ), {"t": f"ws_{int(ws_id)}.t_{int(col.table_id)}", "c": col.physical}).first() is not None
