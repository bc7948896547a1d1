"""Who uses a column or a table, and what a forced delete does to them (issue #21).

Dependents are reported as ``{kind, id, name, table_id}``:

- ``column``: a computed column (any table) whose formula/config reads the column, or
  whose record step writes or reads the table; a relation column whose label column it is
  or which points at the table;
- ``view``: a saved view whose filters, sort or column settings name it;
- ``semantic_search``: a table whose semantic-search columns include it;
- ``schedule``: a schedule whose filters or ``column_ids`` name it.

A forced delete (``?force=true``) removes the terms that named the column from views and
semantic search, clears relation label columns, and marks dependent computed columns
broken (``status: "error"`` and a reason; their value is null and ``pipeline.errors``
names them) until they are edited. Schedules keep their stored filter, which then fails
visibly at its next firing (``UNKNOWN_COLUMN`` in the run).

A table delete reports the columns of other tables that point at it or use it, and what
uses the relation columns that go with it; forced, it detaches each of those relation
columns as a forced delete of that column would (:func:`detach_for_table`).
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb

from storage import ddl, refs
from storage import views as stored_views
from storage.schema import ColumnMeta, TableMeta, WorkspaceSchema, column_name

Conn = AsyncConnection[Any]


def _entry(kind: str, id_: int, name: str, table_id: int | None) -> dict[str, Any]:
    return {"kind": kind, "id": id_, "name": name, "table_id": table_id}


async def column_dependents(
    conn: Conn, *, schema: WorkspaceSchema, table: TableMeta, column: ColumnMeta
) -> list[dict[str, Any]]:
    """Everything that uses ``column`` (empty: it can go without breaking anything)."""
    out: list[dict[str, Any]] = []
    for t in schema.tables.values():
        for c in t.columns:
            if c.id == column.id:
                continue
            reads = c.computed and (column.id in c.refs or column.id in c.other_refs)
            if reads or c.relation_label_column_id == column.id:
                out.append(_entry("column", c.id, c.name, t.id))
    cur = await conn.execute(
        "SELECT id, name, view_type, config FROM wds.views WHERE table_id = %s ORDER BY id", (table.id,)
    )
    for row in await cur.fetchall():
        if stored_views.uses_column(row["view_type"], row["config"] or {}, column.id):
            out.append(_entry("view", row["id"], row["name"], table.id))
    if table.semantic and column.name in (table.semantic.get("columns") or []):
        out.append(_entry("semantic_search", table.id, table.name, table.id))
    cur = await conn.execute(
        "SELECT id, name, spec FROM wds.schedules WHERE table_id = %s ORDER BY id", (table.id,)
    )
    for row in await cur.fetchall():
        spec = row["spec"] or {}
        names = refs.filter_list_columns(spec.get("filters") or [])  # inside or/and groups too
        if f"@{column.id}" in names or column.name in names or column.id in (spec.get("column_ids") or []):
            out.append(_entry("schedule", row["id"], row["name"] or f"schedule {row['id']}", table.id))
    return out


def table_dependents(schema: WorkspaceSchema, table: TableMeta) -> list[dict[str, Any]]:
    """Columns of *other* tables that point at ``table`` (relations, record steps, references)."""
    own = {c.id for c in table.columns}
    out: list[dict[str, Any]] = []
    for t in schema.tables.values():
        if t.id == table.id:
            continue
        for c in t.columns:
            uses = c.computed and bool(c.other_refs & own or _step_target(c) == table.id)
            if c.relation_table_id == table.id or uses:
                out.append(_entry("column", c.id, c.name, t.id))
    return out


def _step_target(col: ColumnMeta) -> int | None:
    target = (col.config or {}).get("table_id")
    return target if isinstance(target, int) and not isinstance(target, bool) else None


async def detach_column(
    conn: Conn, *, table: TableMeta, column: ColumnMeta, dependents: list[dict[str, Any]]
) -> None:
    """Before a forced delete: loosen or mark everything that used ``column``."""
    reason = f"column {column.name!r} (id {column.id}) it reads was deleted; edit this column to fix it"
    for dep in dependents:
        if dep["kind"] == "column":
            cur = await conn.execute(
                "UPDATE wds.columns SET relation_label_column_id = NULL, updated_at = now()"
                " WHERE id = %s AND relation_label_column_id = %s RETURNING id",
                (dep["id"], column.id),
            )
            if await cur.fetchone() is None:  # a computed column: it cannot compute any more
                await _break(conn, workspace_id=table.workspace_id, column_id=dep["id"],
                             table_id=dep["table_id"], reason=reason)
        elif dep["kind"] == "view":
            cur = await conn.execute("SELECT view_type, config FROM wds.views WHERE id = %s", (dep["id"],))
            row = await cur.fetchone()
            if row is not None:
                kept = _without(row["view_type"], row["config"] or {}, column.id)
                await conn.execute(
                    "UPDATE wds.views SET config = %s, updated_at = now() WHERE id = %s", (Jsonb(kept), dep["id"])
                )
        elif dep["kind"] == "semantic_search" and table.semantic:
            ids = {c.name: c.id for c in table.columns}
            cols = [f"@{ids[c]}" for c in table.semantic.get("columns") or [] if c != column.name and c in ids]
            semantic = {**table.semantic, "columns": cols} if cols else None
            await conn.execute(
                "UPDATE wds.tables SET semantic = %s, updated_at = now() WHERE id = %s",
                (Jsonb(semantic) if semantic is not None else None, table.id),
            )
            if semantic is None:  # its last embedded column: search is off, as semantic_search: null turns it
                await ddl.drop_embedding_table(conn, table.workspace_id, table.id)


def _relations_to(schema: WorkspaceSchema, table: TableMeta) -> list[tuple[TableMeta, ColumnMeta]]:
    """Relation columns of *other* tables that point at ``table`` (a table delete drops them)."""
    return [(t, c) for t in schema.tables.values() if t.id != table.id
            for c in t.columns if c.relation_table_id == table.id]


async def table_delete_dependents(conn: Conn, *, schema: WorkspaceSchema, table: TableMeta) -> list[dict[str, Any]]:
    """Everything a delete of ``table`` affects outside it: :func:`table_dependents`, and,
    since the relation columns pointing at it go with it, whatever uses those columns, as
    a delete of each would report it (:func:`column_dependents`: computed columns reading
    the relation, views, semantic search, schedules). Each once; nothing of ``table``."""
    out = table_dependents(schema, table)
    seen = {(d["kind"], d["id"]) for d in out}
    for owner, relation in _relations_to(schema, table):
        for dep in await column_dependents(conn, schema=schema, table=owner, column=relation):
            if dep["table_id"] != table.id and (dep["kind"], dep["id"]) not in seen:
                seen.add((dep["kind"], dep["id"]))
                out.append(dep)
    return out


async def detach_for_table(conn: Conn, *, schema: WorkspaceSchema, table: TableMeta) -> None:
    """Before a forced table delete (of what :func:`table_delete_dependents` reported):
    each relation column pointing at it is detached as a forced delete of that column
    detaches it (:func:`detach_column`: its computed readers marked broken with their values
    cleared, views and semantic search loosened), and computed columns elsewhere that
    used the table itself are marked broken."""
    for owner, relation in _relations_to(schema, table):
        users = [d for d in await column_dependents(conn, schema=schema, table=owner, column=relation)
                 if d["table_id"] != table.id]
        await detach_column(conn, table=owner, column=relation, dependents=users)
    await mark_broken_for_table(conn, table=table, dependents=table_dependents(schema, table))


async def mark_broken_for_table(conn: Conn, *, table: TableMeta, dependents: list[dict[str, Any]]) -> None:
    """Before a forced table delete: computed columns elsewhere that used it are marked broken."""
    reason = f"table {table.name!r} (id {table.id}) it uses was deleted; edit this column to fix it"
    for dep in dependents:
        cur = await conn.execute("SELECT type FROM wds.columns WHERE id = %s", (dep["id"],))
        row = await cur.fetchone()
        if row is not None and row["type"] != "relation":
            await _break(conn, workspace_id=table.workspace_id, column_id=dep["id"],
                         table_id=dep["table_id"], reason=reason)


async def _break(conn: Conn, *, workspace_id: int, column_id: int, table_id: int, reason: str) -> None:
    """Mark a computed column broken and clear its values (a value it can no longer
    compute would be silently stale)."""
    await conn.execute(
        "UPDATE wds.columns SET broken = %s, updated_at = now() WHERE id = %s", (reason, column_id)
    )
    col = sql.Identifier(column_name(column_id))
    await conn.execute(
        sql.SQL("UPDATE {t} SET {c} = NULL WHERE {c} IS NOT NULL").format(
            t=ddl.qualified(workspace_id, table_id), c=col
        )
    )


def _without(view_type: str, config: dict[str, Any], column_id: int) -> dict[str, Any]:
    mark = f"@{column_id}"
    return stored_views._map_columns(view_type, config, lambda ref: None if ref == mark else ref)
