"""Persistence of workspaces, tables and columns, kept in step with their physical DDL.

Functions take a connection (inside the caller's transaction where they write) and
keyword-only arguments; they return rows or ``None`` and never raise HTTP errors.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from storage import convert, ddl, refs, values, valuetype
from storage.columnspec import MAX_OPTIONS, ColumnSpec, new_option_id
from storage.errors import Conflict, LossyChange, ValidationError
from storage.schema import (
    OPTION_COLORS,
    ColumnMeta,
    ColumnType,
    Option,
    TableMeta,
    WorkspaceSchema,
    column_name,
    definition_of,
)

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


def _column_from_row(row: dict[str, Any], names: refs.Names | None = None) -> ColumnMeta:
    """A metadata row as :class:`ColumnMeta`; with ``names``, references read as today's names."""
    kind = row["type"]
    formula, config = row["formula"], row["config"] or {}
    own: frozenset[int] = frozenset()
    other: frozenset[int] = frozenset()
    if names is not None and ColumnType(kind).computed:
        formula, config, found = refs.decode(kind, formula, config, table_id=row["table_id"], names=names)
        own, other = frozenset(found.own), frozenset(found.other)
    return ColumnMeta(
        id=row["id"],
        table_id=row["table_id"],
        name=row["name"],
        type=ColumnType(kind),
        required=row["required"],
        position=row["position"],
        options=tuple(Option(o["id"], o["label"], o["color"]) for o in (row["options"] or [])),
        config=config,
        formula=formula,
        relation_table_id=row["relation_table_id"],
        relation_label_column_id=row["relation_label_column_id"],
        refs=own,
        other_refs=other,
        broken=row.get("broken"),
        value_type=row.get("value_type"),
        definition=definition_of(row) if ColumnType(kind).computed else "",
    )


def names_of(trows: list[dict[str, Any]], crows: list[dict[str, Any]]) -> refs.Names:
    """The id ↔ name index of a workspace from its table and column rows."""
    return refs.Names(
        columns={c["id"]: (c["table_id"], c["name"]) for c in crows},
        tables={t["id"]: t["name"] for t in trows},
    )


async def load_names(conn: Conn, *, workspace_id: int) -> refs.Names:
    """The id ↔ name index as the current transaction sees it."""
    tcur = await conn.execute("SELECT id, name FROM wds.tables WHERE workspace_id = %s", (workspace_id,))
    ccur = await conn.execute(
        "SELECT id, table_id, name FROM wds.columns WHERE workspace_id = %s", (workspace_id,)
    )
    return names_of(await tcur.fetchall(), await ccur.fetchall())


def _shown_semantic(semantic: dict[str, Any] | None, names: refs.Names) -> dict[str, Any] | None:
    """Semantic-search settings with today's column names (stored by id)."""
    if not semantic or not semantic.get("columns"):
        return semantic
    return {**semantic, "columns": refs.decode_names(semantic["columns"], names.name)}


async def load_schema(conn: Conn, *, workspace_id: int) -> WorkspaceSchema:
    """Every table of a workspace with its columns, in two queries."""
    tcur = await conn.execute(
        "SELECT * FROM wds.tables WHERE workspace_id = %s ORDER BY id", (workspace_id,)
    )
    trows = await tcur.fetchall()
    ccur = await conn.execute(
        "SELECT * FROM wds.columns WHERE workspace_id = %s ORDER BY table_id, position, id", (workspace_id,)
    )
    crows = await ccur.fetchall()
    names = names_of(trows, crows)
    by_table: dict[int, list[ColumnMeta]] = {}
    for row in crows:
        by_table.setdefault(row["table_id"], []).append(_column_from_row(row, names))
    tables = {
        t["id"]: TableMeta(
            id=t["id"],
            workspace_id=workspace_id,
            name=t["name"],
            icon=t["icon"],
            columns=tuple(by_table.get(t["id"], ())),
            created_at=t["created_at"],
            updated_at=t["updated_at"],
            semantic=_shown_semantic(t["semantic"], names),
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


async def column_types(conn: Conn, *, table_id: int) -> dict[int, str]:
    """Column id → type of the table's columns as the schema has them now (one small
    statement): whether a table snapshot a run took is still how its rows are stored."""
    cur = await conn.execute("SELECT id, type FROM wds.columns WHERE table_id = %s", (table_id,))
    return {row["id"]: row["type"] for row in await cur.fetchall()}


async def changed_columns(conn: Conn, *, table_id: int, types: Mapping[int, str]) -> dict[int, str | None]:
    """Of a snapshot's columns (``types``: column id → its type then), those deleted or
    converted since: column id → its type now (``None``: deleted). One small statement."""
    now = await column_types(conn, table_id=table_id)
    return {cid: now.get(cid) for cid, then in types.items() if now.get(cid) != then}


async def update_table(conn: Conn, *, table_id: int, changes: dict[str, Any]) -> dict[str, Any] | None:
    allowed = {"name", "icon", "semantic"}
    sets = [k for k in changes if k in allowed]
    if changes.get("semantic") and changes["semantic"].get("columns"):
        # semantic-search columns are stored by id (a rename carries)
        cur = await conn.execute("SELECT id, name FROM wds.columns WHERE table_id = %s", (table_id,))
        ids = {r["name"]: r["id"] for r in await cur.fetchall()}
        changes = {**changes, "semantic": {
            **changes["semantic"], "columns": refs.encode_names(changes["semantic"]["columns"], ids.get)}}
    values = [Jsonb(changes[k]) if k == "semantic" and changes[k] is not None else changes[k] for k in sets]
    assignments = "".join(f"{k} = %s, " for k in sets)  # keys from the allow-list above
    cur = await conn.execute(
        f"UPDATE wds.tables SET {assignments}updated_at = now() WHERE id = %s RETURNING *",
        values + [table_id],
    )
    return await cur.fetchone()


DELETE_LOCK_STEP_MS = 100  # a table delete waits this long for a lock before stepping back
DELETE_LOCK_WITHIN_S = 30  # ... and tries again for at most this long (then 409 CONFLICT)


async def lock_table_for_delete(conn: Conn, *, workspace_id: int, table_id: int) -> None:
    """Take, first thing in a table delete's transaction, the data tables it will change,
    in the order writers lock them: the tables whose relation columns point at it (a
    write there locks its own table, then the target's rows through the foreign key),
    then the table itself (a write there locks it, then its ``wds.tables`` row through
    the outbox row's foreign key). Deleting the ``wds.tables`` row first and dropping the
    data table last deadlocked with every such write in flight. Writes in flight finish
    first; later ones wait and then find the table gone."""
    cur = await conn.execute(
        "SELECT DISTINCT table_id FROM wds.columns WHERE workspace_id = %s AND relation_table_id = %s"
        " AND table_id <> %s ORDER BY table_id",
        (workspace_id, table_id, table_id),
    )
    ids = [r["table_id"] for r in await cur.fetchall()] + [table_id]
    # LOCK TABLE takes a list's tables one by one, in list order
    statement = sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
        sql.SQL(", ").join(ddl.qualified(workspace_id, t) for t in ids))
    # Two tables pointing at each other have no order that is every writer's (a write into
    # A locks A then B's rows, one into B locks B then A's): holding one while waiting for
    # the other deadlocked with a write in flight. So a lock is waited for at most
    # DELETE_LOCK_STEP_MS, and an attempt that did not get them all gives back what it
    # took (its savepoint) and tries again a little later: no write waits on the delete
    # while the delete waits, so PostgreSQL never has a deadlock to break.
    cur = await conn.cursor(row_factory=tuple_row).execute("SELECT current_setting('lock_timeout')")
    previous = (await cur.fetchone())[0]
    deadline = time.monotonic() + DELETE_LOCK_WITHIN_S
    while True:
        try:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = {int(DELETE_LOCK_STEP_MS)}")
                await conn.execute(statement)
            break
        except psycopg.errors.LockNotAvailable:
            if time.monotonic() > deadline:
                raise Conflict(f"writes kept the table busy for {DELETE_LOCK_WITHIN_S} s; nothing was deleted:"
                               " retry the request", headers={"Retry-After": "1"}) from None
            await asyncio.sleep(random.uniform(0.005, 0.05))
    await conn.execute("SELECT set_config('lock_timeout', %s, true)", (previous,))


async def delete_table(conn: Conn, *, workspace_id: int, table_id: int) -> None:
    """Drop a table, its records, and relation columns of other tables that point at it.
    Take :func:`lock_table_for_delete` first in the same transaction (before anything else
    the delete changes), or writes in flight deadlock with it."""
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


async def create_column(
    conn: Conn, *, workspace_id: int, table_id: int, spec: ColumnSpec, encode: bool = True
) -> ColumnMeta:
    """Insert a column and its physical column; references are stored by id.

    ``encode=False`` stores the formula/config as given (table creation, whose columns
    may name each other in any order, encodes them all with :func:`encode_table_columns`).

    Raises:
        UnknownColumn: a formula or config names a column that does not exist.
    """
    cur = await conn.execute(
        "SELECT coalesce(max(position) + 1, 0) AS p FROM wds.columns WHERE table_id = %s", (table_id,)
    )
    prow = await cur.fetchone()
    after_last = prow["p"] if prow else 0
    if spec.position is None or spec.position >= after_last:  # past the last column: the last
        position = after_last
    else:
        position = spec.position
        await conn.execute(
            "UPDATE wds.columns SET position = position + 1 WHERE table_id = %s AND position >= %s",
            (table_id, position),
        )
    formula, config = spec.formula, spec.config
    # one index read serves encoding and the answer (a column never reads itself)
    names = await load_names(conn, workspace_id=workspace_id) if spec.type.computed else None
    if names is not None and encode:
        formula, config = refs.encode(spec.type.value, formula, config, table_id=table_id, names=names)
    value_type = await _value_type(conn, table_id=table_id, spec=spec)
    cur = await conn.execute(
        "INSERT INTO wds.columns (workspace_id, table_id, name, type, required, position, options,"
        " config, formula, relation_table_id, relation_label_column_id, value_type)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING *",
        (
            workspace_id, table_id, spec.name, spec.type.value, spec.required, position,
            Jsonb(spec.options_json()), Jsonb(config), formula,
            spec.relation_table_id, spec.relation_label_column_id, value_type,
        ),
    )
    row = await cur.fetchone()
    assert row is not None
    col = _column_from_row(row, names)
    await ddl.add_column(conn, workspace_id, col)
    await touch_table(conn, table_id=table_id)
    return col


async def encode_table_columns(conn: Conn, *, workspace_id: int, table_id: int) -> None:
    """Store the references of a table's computed columns by id (after creating them all).

    Raises:
        UnknownColumn: a formula or config names a column that does not exist.
    """
    names = await load_names(conn, workspace_id=workspace_id)
    cur = await conn.execute(
        "SELECT id, type, formula, config FROM wds.columns WHERE table_id = %s ORDER BY id", (table_id,)
    )
    for row in await cur.fetchall():
        if not ColumnType(row["type"]).computed:
            continue
        formula, config = refs.encode(
            row["type"], row["formula"], row["config"] or {}, table_id=table_id, names=names
        )
        await conn.execute(
            "UPDATE wds.columns SET formula = %s, config = %s WHERE id = %s", (formula, Jsonb(config), row["id"])
        )
    # a formula may read a column made after it in the same table: its type is known now
    await _refresh_value_types(conn, workspace_id=workspace_id, table_id=table_id)


async def _value_type(conn: Conn, *, table_id: int, spec: ColumnSpec, column_id: int | None = None) -> str | None:
    """The value type of a new or changed column (storage/valuetype.py); a formula reads
    the types of the table's other columns by name."""
    if not spec.type.computed:
        return None
    lookup = None
    if spec.type is ColumnType.FORMULA and "result_type" not in spec.config:
        cur = await conn.execute(
            "SELECT name, type, value_type FROM wds.columns WHERE table_id = %s AND id IS DISTINCT FROM %s",
            (table_id, column_id),
        )
        lookup = valuetype.field_types({r["name"]: (r["type"], r["value_type"]) for r in await cur.fetchall()})
    return valuetype.value_type_of(spec.type, spec.formula, spec.config, lookup)


def spec_of(col: ColumnMeta) -> ColumnSpec:
    return ColumnSpec(
        name=col.name, type=col.type, required=col.required, options=col.options,
        config=dict(col.config), formula=col.formula, relation_table_id=col.relation_table_id,
        relation_label_column_id=col.relation_label_column_id, position=col.position,
    )


async def update_column(
    conn: Conn, *, workspace_id: int, current: ColumnMeta, spec: ColumnSpec,
    allow_loss: bool = False, report: dict[str, int] | None = None,
) -> ColumnMeta:
    """Persist a validated column change and adapt the physical column.

    A type change converts every stored value (``storage/convert.py``); removed select
    options are cleared from stored values. Either refuses with ``LossyChange`` when a
    non-blank value would be dropped, unless ``allow_loss``. ``report``, when given, is
    filled with ``converted`` and ``lost`` counts. References
    in the formula/config are stored by id; a rename touches this row only. A column
    marked broken by a forced delete is repaired by any change that validates.
    """
    formula, config = spec.formula, spec.config
    # a broken column keeps its dangling references (and its mark) until they are edited
    untouched = spec.type is current.type and spec.formula == current.formula and spec.config == current.config
    broken = current.broken if untouched else None
    names = await load_names(conn, workspace_id=workspace_id) if spec.type.computed else None
    if names is not None:
        formula, config = refs.encode(
            spec.type.value, formula, config, table_id=current.table_id, names=names, strict=not untouched
        )
    if spec.position is not None and spec.position != current.position:
        await conn.execute(
            "UPDATE wds.columns SET position = position + 1 WHERE table_id = %s AND position >= %s AND id <> %s",
            (current.table_id, spec.position, current.id),
        )
    # a formula edit may change the value type: re-indexed below, in this transaction
    value_type = current.value_type if untouched else await _value_type(
        conn, table_id=current.table_id, spec=spec, column_id=current.id)
    cur = await conn.execute(
        "UPDATE wds.columns SET name = %s, type = %s, required = %s, position = %s, options = %s,"
        " config = %s, formula = %s, relation_table_id = %s, relation_label_column_id = %s,"
        " broken = %s, value_type = %s, updated_at = now() WHERE id = %s RETURNING *",
        (
            spec.name, spec.type.value, spec.required,
            spec.position if spec.position is not None else current.position,
            Jsonb(spec.options_json()), Jsonb(config), formula, spec.relation_table_id,
            spec.relation_label_column_id, broken, value_type, current.id,
        ),
    )
    row = await cur.fetchone()
    assert row is not None
    new = _column_from_row(row, names)
    if new.type is not current.type or new.relation_table_id != current.relation_table_id:
        new = await _convert_values(
            conn, workspace_id=workspace_id, old=current, new=new, allow_loss=allow_loss, report=report
        )
    elif new.computed and new.scalar_value_type != current.scalar_value_type:
        await ddl.reindex_computed(conn, workspace_id, current, new)
    elif new.type in (ColumnType.SINGLE_SELECT, ColumnType.MULTI_SELECT):
        removed = {o.id for o in current.options} - {o.id for o in new.options}
        if removed:
            await _clear_options(
                conn, workspace_id=workspace_id, col=new, removed=removed, allow_loss=allow_loss, report=report
            )
    if new.type is not current.type or new.value_type != current.value_type:
        # formulas that read this column may now have another type
        await _refresh_value_types(conn, workspace_id=workspace_id, table_id=current.table_id)
    await touch_table(conn, table_id=current.table_id)
    return new


async def _refresh_value_types(conn: Conn, *, workspace_id: int, table_id: int) -> None:
    """Re-infer the value type of the table's formula columns without a declared one
    (after a column they may read changed type), re-indexing those whose type changed;
    repeated until nothing changes, so formulas reading formulas follow."""
    cur = await conn.execute(
        "SELECT id, name, type, formula, config, value_type FROM wds.columns WHERE table_id = %s ORDER BY id",
        (table_id,),
    )
    rows = await cur.fetchall()
    known = {f"@{r['id']}": (r["type"], r["value_type"]) for r in rows}
    formulas = [r for r in rows if r["type"] == ColumnType.FORMULA.value
                and valuetype.RESULT_TYPE_KEY not in (r["config"] or {})]
    for _ in range(len(formulas)):
        changed = False
        for r in formulas:
            old_type = known[f"@{r['id']}"][1]
            value_type = valuetype.value_type_of(
                ColumnType.FORMULA, r["formula"], r["config"] or {}, valuetype.field_types(known))
            if value_type == old_type:
                continue
            old = ColumnMeta(id=r["id"], table_id=table_id, name=r["name"], type=ColumnType.FORMULA,
                             value_type=old_type)
            await conn.execute("UPDATE wds.columns SET value_type = %s WHERE id = %s", (value_type, r["id"]))
            await ddl.reindex_computed(conn, workspace_id, old, replace(old, value_type=value_type))
            known[f"@{r['id']}"] = (r["type"], value_type)
            changed = True
        if not changed:
            return


async def _convert_values(
    conn: Conn, *, workspace_id: int, old: ColumnMeta, new: ColumnMeta, allow_loss: bool,
    report: dict[str, int] | None,
) -> ColumnMeta:
    """Convert a column's values to its new type in place (issue 21 item 5), in SQL.

    Counts, with one scan, the values that would not convert; refuses with
    ``LossyChange`` (nothing changed) when any would be lost and ``allow_loss`` is not
    set. A change to a select type first creates the options its values need; the
    returned column has them.
    """
    target = ddl.qualified(workspace_id, old.table_id)
    # writers wait until the change commits: no value lands between the count and the ALTER
    await conn.execute(sql.SQL("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE").format(target))
    if old.computed and new.computed:
        # computed values are recomputed by the next run: the column starts empty
        await ddl.retype_column(conn, workspace_id, old, new, sql.SQL("NULL::jsonb"))
        return new
    for statement in convert.helper_functions(values.file_base_url()):
        await conn.execute(statement)
    labels = convert.label_query(old, new, target)
    if labels is not None:
        new = await _add_missing_options(conn, col=new, labels=labels)
    if new.type is ColumnType.RELATION and new.relation_table_id is not None:
        related = ddl.qualified(workspace_id, new.relation_table_id)
        await conn.execute(sql.SQL("LOCK TABLE {} IN SHARE MODE").format(related))
        label = None
        if new.relation_label_column_id is not None:
            cur = await conn.execute(
                "SELECT type FROM wds.columns WHERE id = %s", (new.relation_label_column_id,)
            )
            lrow = await cur.fetchone()
            if lrow is not None and lrow["type"] == ColumnType.TEXT.value:
                label = sql.Identifier(column_name(new.relation_label_column_id))
        await conn.execute(convert.relation_function(related, label))
    p = convert.plan(old, new)
    row = await (await conn.execute(convert.loss_query(target, old, p))).fetchone()
    assert row is not None
    converted, lost = int(row["converted"]), int(row["lost"])
    if lost and not allow_loss:
        ids = [r["id"] for r in await (await conn.execute(convert.lost_ids_query(target, old, p))).fetchall()]
        raise LossyChange(
            f"changing column {old.name!r} from {old.type.value} to {new.type.value} would lose {lost}"
            " value(s); send allow_loss: true to change it anyway",
            count=lost, record_ids=ids,
        )
    await ddl.retype_column(conn, workspace_id, old, new, p.using)
    if report is not None:
        report.update(converted=converted, lost=lost)
    return new


async def _add_missing_options(conn: Conn, *, col: ColumnMeta, labels: sql.Composable) -> ColumnMeta:
    """Give a select column an option for every label its converted values need (colors
    cycle through the palette after the existing options)."""
    known = {o.label for o in col.options} | {o.id for o in col.options}
    cur = await conn.execute(sql.SQL("{} LIMIT {}").format(labels, sql.Literal(MAX_OPTIONS + len(known) + 1)))
    missing = [r["label"] for r in await cur.fetchall() if r["label"] not in known]
    if not missing:
        return col
    if len(col.options) + len(missing) > MAX_OPTIONS:
        raise ValidationError(
            f"column {col.name!r} would need more than {MAX_OPTIONS} options for its values"
        )
    start = len(col.options)
    options = col.options + tuple(
        Option(new_option_id(), label, OPTION_COLORS[(start + i) % len(OPTION_COLORS)])
        for i, label in enumerate(missing)
    )
    await conn.execute(
        "UPDATE wds.columns SET options = %s WHERE id = %s", (Jsonb([o.as_dict() for o in options]), col.id)
    )
    return replace(col, options=options)


async def _clear_options(
    conn: Conn, *, workspace_id: int, col: ColumnMeta, removed: set[str], allow_loss: bool = False,
    report: dict[str, int] | None = None,
) -> None:
    name = sql.Identifier(col.physical)
    target = ddl.qualified(workspace_id, col.table_id)
    in_use = sql.SQL("{c} = ANY(%s)" if col.type is ColumnType.SINGLE_SELECT else "{c} && %s").format(c=name)
    await conn.execute(sql.SQL("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE").format(target))
    cur = await conn.execute(
        sql.SQL("SELECT id, count(*) OVER () AS n FROM {t} WHERE {w} ORDER BY id LIMIT 10").format(t=target, w=in_use),
        [list(removed)],
    )
    rows = await cur.fetchall()
    lost = int(rows[0]["n"]) if rows else 0
    if lost and not allow_loss:
        raise LossyChange(
            f"{lost} record(s) use the option(s) removed from column {col.name!r}; send allow_loss: true"
            " to remove them anyway (the records lose those values)",
            count=lost, record_ids=[r["id"] for r in rows],
        )
    if report is not None:
        report.update(converted=0, lost=lost)
    if not lost:
        return
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
