"""Column references stored by id (issue #21).

* ``wds.columns.broken``: why a computed column cannot compute (a column it read was
  deleted with ``?force=true``); ``NULL`` when it can.
* Every computed column's formula and config, every view's config, schedule filters and
  semantic-search columns move from column names to column ids (:mod:`storage.refs`, :func:`storage.views.encode_config`), so a
  rename carries everywhere and a delete knows its dependents. A reference to a name that
  no column has (accepted before this release, it read as blank) is kept as written and
  the column is marked broken with a reason, instead of silently computing from nothing.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql.expression import bindparam

from storage import refs
from storage.errors import ServiceError
from storage.schema import ColumnMeta, ColumnType, TableMeta
from storage.views import encode_config


def upgrade(conn: Connection) -> None:
    conn.execute(text("ALTER TABLE wds.columns ADD COLUMN IF NOT EXISTS broken text"))
    workspaces = [r[0] for r in conn.execute(text("SELECT id FROM wds.workspaces ORDER BY id"))]
    for ws in workspaces:
        _upgrade_workspace(conn, ws)


def _upgrade_workspace(conn: Connection, ws: int) -> None:
    tables = {r.id: r.name for r in conn.execute(text("SELECT id, name FROM wds.tables WHERE workspace_id = :w"),
                                                  {"w": ws})}
    rows = list(conn.execute(
        text("SELECT id, table_id, name, type, formula, config, position FROM wds.columns"
             " WHERE workspace_id = :w ORDER BY id"), {"w": ws}).mappings())
    names = refs.Names(columns={r["id"]: (r["table_id"], r["name"]) for r in rows}, tables=tables)
    update = text("UPDATE wds.columns SET formula = :f, config = :c, broken = :b WHERE id = :id").bindparams(
        bindparam("c", type_=JSONB)
    )
    for r in rows:
        if not ColumnType(r["type"]).computed:
            continue
        config: dict[str, Any] = r["config"] or {}
        try:
            _, _, found = refs.decode(r["type"], r["formula"], config, table_id=r["table_id"], names=names)
        except Exception:  # noqa: BLE001 - text that does not decode is encoded (or marked) below
            found = None
        if found is not None and (found.own or found.other or found.missing):
            continue  # stored by id already (the migration is idempotent)
        broken = None
        try:
            refs.encode(r["type"], r["formula"], config, table_id=r["table_id"], names=names)
        except ServiceError as exc:
            broken = f"{exc.message} (found when references moved to ids); edit this column to fix it"
        try:
            formula, config = refs.encode(r["type"], r["formula"], config, table_id=r["table_id"], names=names,
                                          strict=False)
        except Exception as exc:  # noqa: BLE001 - never block a start on one bad row: keep it, marked
            formula = r["formula"]
            broken = f"{getattr(exc, 'message', exc)} (found when references moved to ids); edit this column to fix it"
        conn.execute(update, {"f": formula, "c": config, "b": broken, "id": r["id"]})
    by_table: dict[int, list[ColumnMeta]] = {}
    for r in rows:
        by_table.setdefault(r["table_id"], []).append(
            ColumnMeta(id=r["id"], table_id=r["table_id"], name=r["name"], type=ColumnType(r["type"]))
        )
    supdate = text("UPDATE wds.schedules SET spec = :s WHERE id = :id").bindparams(bindparam("s", type_=JSONB))
    for sc in conn.execute(text("SELECT id, table_id, spec FROM wds.schedules WHERE workspace_id = :w"),
                           {"w": ws}).mappings():
        spec = dict(sc["spec"] or {})
        if spec.get("filters"):
            spec["filters"] = refs.encode_filter_list(spec["filters"], lambda n, t=sc["table_id"]: names.column_id(t, n))
            conn.execute(supdate, {"s": spec, "id": sc["id"]})
    tupdate = text("UPDATE wds.tables SET semantic = :s WHERE id = :id").bindparams(bindparam("s", type_=JSONB))
    for tb in conn.execute(text("SELECT id, semantic FROM wds.tables WHERE workspace_id = :w AND semantic IS NOT NULL"),
                           {"w": ws}).mappings():
        semantic = dict(tb["semantic"])
        semantic["columns"] = refs.encode_names(semantic.get("columns") or [],
                                                lambda n, t=tb["id"]: names.column_id(t, n))
        conn.execute(tupdate, {"s": semantic, "id": tb["id"]})
    vupdate = text("UPDATE wds.views SET config = :c WHERE id = :id").bindparams(bindparam("c", type_=JSONB))
    for v in conn.execute(text("SELECT id, table_id, view_type, config FROM wds.views WHERE workspace_id = :w"),
                          {"w": ws}).mappings():
        table = TableMeta(id=v["table_id"], workspace_id=ws, name=tables.get(v["table_id"], ""), icon=None,
                          columns=tuple(by_table.get(v["table_id"], ())))
        conn.execute(vupdate, {"c": encode_config(v["view_type"], v["config"] or {}, table), "id": v["id"]})
