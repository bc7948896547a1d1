"""Each data column's btree index covers ``(value, id)`` (issue #24).

A list's ORDER BY is the column then ``id`` in the same direction
(storage/query/plan.py), so with ``(value, id)`` the index hands out a sorted or
range-filtered page directly; on ``(value)`` alone PostgreSQL had to read and sort every
row tied on the first value, which grows with the table. Existing ``t_<t>_c_<c>`` btree
indexes are rebuilt in place (large deployments may pre-create the new index
``CONCURRENTLY`` under another name and swap; docs/operations.md, "Scale").
"""

from __future__ import annotations

from sqlalchemy import Connection, text

_BTREE_TYPES = ("text", "number", "date", "checkbox", "single_select", "relation")


def upgrade(conn: Connection) -> None:
    rows = conn.execute(text(
        "SELECT c.id, c.table_id, t.workspace_id FROM wds.columns c JOIN wds.tables t ON t.id = c.table_id"
        " WHERE c.type = ANY(:types) ORDER BY c.id"), {"types": list(_BTREE_TYPES)}).mappings()
    for r in rows:
        schema, index = f"ws_{int(r['workspace_id'])}", f"t_{int(r['table_id'])}_c_{int(r['id'])}"
        exists = conn.execute(text(
            "SELECT 1 FROM pg_indexes WHERE schemaname = :s AND indexname = :i"), {"s": schema, "i": index}).first()
        if exists is None:
            continue
        conn.execute(text(f'DROP INDEX "{schema}"."{index}"'))
        conn.execute(text(
            f'CREATE INDEX "{index}" ON "{schema}"."t_{int(r["table_id"])}" ("c_{int(r["id"])}", id)'))
