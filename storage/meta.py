"""Persistence of workspaces, tables and columns, kept in step with their physical DDL.

Functions take a connection (inside the caller's transaction where they write) and
keyword-only arguments; they return rows or ``None`` and never raise HTTP errors.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb

from storage import ddl
from storage.columnspec import ColumnSpec
from storage.schema import ColumnMeta, ColumnType, Option, TableMeta, WorkspaceSchema

Conn = AsyncConnection[Any]

# --------------------------------------------------------------------------- workspaces


async def create_workspace(conn: Conn, *, name: str, plan: str) -> dict[str, Any]:
    cur = await conn.execute(
        "INSERT INTO wds.workspaces (name, plan) VALUES (%s, %s) RETURNING *", (name, plan)
    )
    row = await cur.fetchone()
    assert row is not None
    await ddl.create_workspace_schema(conn, row["id"])
    return row


async def get_workspace(conn: Conn, *, workspace_id: int) -> dict[str, Any] | None:
    cur = await conn.execute("SELECT * FROM wds.workspaces WHERE id = %s", (workspace_id,))
    return await cur.fetchone()


async def list_workspaces(conn: Conn) -> list[dict[str, Any]]:
    cur = await conn.execute("SELECT * FROM wds.workspaces ORDER BY id")
    return await cur.fetchall()


async def update_workspace(conn: Conn, *, workspace_id: int, changes: dict[str, Any]) -> dict[str, Any] | None:
    allowed = {"name", "plan", "read_only", "auto_recharge", "relay_profile_id", "signup_fields"}
    sets = [k for k in changes if k in allowed]
    if not sets:
        return await get_workspace(conn, workspace_id=workspace_id)
    assignments = ", ".join(f"{k} = %s" for k in sets)  # keys from the allow-list above
    cur = await conn.execute(
        f"UPDATE wds.workspaces SET {assignments}, updated_at = now() WHERE id = %s RETURNING *",
        [Jsonb(changes[k]) if k == "signup_fields" else changes[k] for k in sets] + [workspace_id],
    )
    return await cur.fetchone()


# --------------------------------------------------------------------------- schema loading


def _column_from_row(row: dict[str, Any]) -> ColumnMeta:
    return ColumnMeta(
        id=row["id"],
        table_id=row["table_id"],
        name=row["name"],
        type=ColumnType(row["type"]),
        required=row["required"],
        position=row["position"],
        options=tuple(Option(o["id"], o["label"], o["color"]) for o in (row["options"] or [])),
        config=row["config"] or {},
        formula=row["formula"],
        relation_table_id=row["relation_table_id"],
        relation_label_column_id=row["relation_label_column_id"],
    )


async def load_schema(conn: Conn, *, workspace_id: int) -> WorkspaceSchema:
    """Every table of a workspace with its columns, in two queries."""
    tcur = await conn.execute(
        "SELECT * FROM wds.tables WHERE workspace_id = %s ORDER BY id", (workspace_id,)
    )
    trows = await tcur.fetchall()
    ccur = await conn.execute(
        "SELECT * FROM wds.columns WHERE workspace_id = %s ORDER BY table_id, position, id", (workspace_id,)
    )
    by_table: dict[int, list[ColumnMeta]] = {}
    for row in await ccur.fetchall():
        by_table.setdefault(row["table_id"], []).append(_column_from_row(row))
    tables = {
        t["id"]: TableMeta(
            id=t["id"],
            workspace_id=workspace_id,
            name=t["name"],
            icon=t["icon"],
            columns=tuple(by_table.get(t["id"], ())),
            created_at=t["created_at"],
            updated_at=t["updated_at"],
            semantic=t["semantic"],
        )
        for t in trows
    }
    return WorkspaceSchema(workspace_id=workspace_id, tables=tables)


# --------------------------------------------------------------------------- tables


async def table_name_taken(conn: Conn, *, workspace_id: int, name: str, exclude_id: int | None = None) -> bool:
    cur = await conn.execute(
        "SELECT 1 FROM wds.tables WHERE workspace_id = %s AND name = %s AND id IS DISTINCT FROM %s",
        (workspace_id, name, exclude_id),
    )
    return await cur.fetchone() is not None


async def create_table(
    conn: Conn, *, workspace_id: int, name: str, icon: str | None, token_id: int | None
) -> dict[str, Any]:
    cur = await conn.execute(
        "INSERT INTO wds.tables (workspace_id, name, icon, created_by_token_id)"
        " VALUES (%s, %s, %s, %s) RETURNING *",
        (workspace_id, name, icon, token_id),
    )
    row = await cur.fetchone()
    assert row is not None
    await ddl.create_table(conn, workspace_id, row["id"])
    return row


async def update_table(conn: Conn, *, table_id: int, changes: dict[str, Any]) -> dict[str, Any] | None:
    allowed = {"name", "icon", "semantic"}
    sets = [k for k in changes if k in allowed]
    values = [Jsonb(changes[k]) if k == "semantic" and changes[k] is not None else changes[k] for k in sets]
    assignments = "".join(f"{k} = %s, " for k in sets)  # keys from the allow-list above
    cur = await conn.execute(
        f"UPDATE wds.tables SET {assignments}updated_at = now() WHERE id = %s RETURNING *",
        values + [table_id],
    )
    return await cur.fetchone()


async def delete_table(conn: Conn, *, workspace_id: int, table_id: int) -> None:
    """Drop a table, its records, and relation columns of other tables that point at it."""
    cur = await conn.execute(
        "DELETE FROM wds.columns WHERE workspace_id = %s AND relation_table_id = %s AND table_id <> %s"
        " RETURNING *",
        (workspace_id, table_id, table_id),
    )
    for row in await cur.fetchall():
        await ddl.drop_column(conn, workspace_id, _column_from_row(row))
    await conn.execute("DELETE FROM wds.tables WHERE id = %s", (table_id,))
    await ddl.drop_table(conn, workspace_id, table_id)


async def touch_table(conn: Conn, *, table_id: int) -> None:
    await conn.execute("UPDATE wds.tables SET updated_at = now() WHERE id = %s", (table_id,))


# --------------------------------------------------------------------------- columns


async def create_column(conn: Conn, *, workspace_id: int, table_id: int, spec: ColumnSpec) -> ColumnMeta:
    if spec.position is None:
        cur = await conn.execute(
            "SELECT coalesce(max(position) + 1, 0) AS p FROM wds.columns WHERE table_id = %s", (table_id,)
        )
        prow = await cur.fetchone()
        position = prow["p"] if prow else 0
    else:
        position = spec.position
        await conn.execute(
            "UPDATE wds.columns SET position = position + 1 WHERE table_id = %s AND position >= %s",
            (table_id, position),
        )
    cur = await conn.execute(
        "INSERT INTO wds.columns (workspace_id, table_id, name, type, required, position, options,"
        " config, formula, relation_table_id, relation_label_column_id)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING *",
        (
            workspace_id, table_id, spec.name, spec.type.value, spec.required, position,
            Jsonb(spec.options_json()), Jsonb(spec.config), spec.formula,
            spec.relation_table_id, spec.relation_label_column_id,
        ),
    )
    row = await cur.fetchone()
    assert row is not None
    col = _column_from_row(row)
    await ddl.add_column(conn, workspace_id, col)
    await touch_table(conn, table_id=table_id)
    return col


def spec_of(col: ColumnMeta) -> ColumnSpec:
    return ColumnSpec(
        name=col.name, type=col.type, required=col.required, options=col.options,
        config=dict(col.config), formula=col.formula, relation_table_id=col.relation_table_id,
        relation_label_column_id=col.relation_label_column_id, position=col.position,
    )


async def update_column(
    conn: Conn, *, workspace_id: int, current: ColumnMeta, spec: ColumnSpec
) -> ColumnMeta:
    """Persist a validated column change and adapt the physical column.

    Removed select options are cleared from stored values; a type change keeps data
    where the storage type allows (see ``storage/ddl.py``) and otherwise re-creates the
    physical column empty — the caller decides which changes are permitted.
    """
    if spec.position is not None and spec.position != current.position:
        await conn.execute(
            "UPDATE wds.columns SET position = position + 1 WHERE table_id = %s AND position >= %s AND id <> %s",
            (current.table_id, spec.position, current.id),
        )
    cur = await conn.execute(
        "UPDATE wds.columns SET name = %s, type = %s, required = %s, position = %s, options = %s,"
        " config = %s, formula = %s, relation_table_id = %s, relation_label_column_id = %s,"
        " updated_at = now() WHERE id = %s RETURNING *",
        (
            spec.name, spec.type.value, spec.required,
            spec.position if spec.position is not None else current.position,
            Jsonb(spec.options_json()), Jsonb(spec.config), spec.formula, spec.relation_table_id,
            spec.relation_label_column_id, current.id,
        ),
    )
    row = await cur.fetchone()
    assert row is not None
    new = _column_from_row(row)
    if new.type is not current.type or new.relation_table_id != current.relation_table_id:
        if new.type is ColumnType.TEXT:
            await ddl.convert_column_to_text(conn, workspace_id, current)
        else:
            # no lossless conversion: the column starts empty (computed ones are recomputed)
            await ddl.drop_column(conn, workspace_id, current)
            await ddl.add_column(conn, workspace_id, new)
    elif new.type in (ColumnType.SINGLE_SELECT, ColumnType.MULTI_SELECT):
        removed = {o.id for o in current.options} - {o.id for o in new.options}
        if removed:
            await _clear_options(conn, workspace_id=workspace_id, col=new, removed=removed)
    await touch_table(conn, table_id=current.table_id)
    return new


async def _clear_options(conn: Conn, *, workspace_id: int, col: ColumnMeta, removed: set[str]) -> None:
    name = sql.Identifier(col.physical)
    target = ddl.qualified(workspace_id, col.table_id)
    if col.type is ColumnType.SINGLE_SELECT:
        q = sql.SQL("UPDATE {t} SET {c} = NULL, updated_at = clock_timestamp() WHERE {c} = ANY(%s)")
    else:
        q = sql.SQL(
            "UPDATE {t} SET {c} = ARRAY(SELECT x FROM unnest({c}) x WHERE x <> ALL(%s)),"
            " updated_at = clock_timestamp() WHERE {c} && %s"
        )
    params: list[Any] = [list(removed)] if col.type is ColumnType.SINGLE_SELECT else [list(removed)] * 2
    await conn.execute(q.format(t=target, c=name), params)


async def delete_column(conn: Conn, *, workspace_id: int, col: ColumnMeta) -> None:
    await conn.execute("DELETE FROM wds.columns WHERE id = %s", (col.id,))
    await ddl.drop_column(conn, workspace_id, col)
    await touch_table(conn, table_id=col.table_id)
