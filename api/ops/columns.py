"""Column operations: list, get, create, change (rename, options, formula, type), delete,
reorder — for every door. Doors name the column by id (MCP resolves names first)."""

from __future__ import annotations

from typing import Any

from api.deps import require_writable, table_or_404
from api.ops.access import require_manage, table_for
from api.ops.schema_tx import check_column_hosts, schema_change
from api.schemas import ColumnIn, ColumnPatch
from api.serialize import column_out
from api.services import embeddings as semantic_search
from api.services.backfill import PURE_KINDS, backfill_after_change, start_backfill
from api.state import AppState
from storage import appusers, dependents, meta
from storage.access import Action, Principal
from storage.columnspec import parse_column_patch, parse_new_column
from storage.errors import ColumnInUse, Conflict, NotFound, ValidationError
from storage.pipelines import check_computed_columns, dependant_ids
from storage.schema import ColumnMeta, TableMeta


def column_or_404(table: TableMeta, column_id: int) -> ColumnMeta:
    col = table.column_by_id(column_id)
    if col is None:
        raise NotFound(f"column {column_id} not found in table {table.id}")
    return col


def column_ref(table: TableMeta, ref: Any) -> ColumnMeta:
    """A column named by id or name (as MCP tools name them)."""
    col = table.column_ref(ref)
    if col is None:
        raise NotFound(f"column {ref!r} not found in table {table.name!r}")
    return col


async def list_columns(state: AppState, principal: Principal, table_ref: int | str) -> list[dict[str, Any]]:
    table = await table_for(state, principal, table_ref, Action.READ)
    return [column_out(c) for c in table.columns]


async def get_column(state: AppState, principal: Principal, table_ref: int | str, column_id: int) -> dict[str, Any]:
    table = await table_for(state, principal, table_ref, Action.READ)
    return column_out(column_or_404(table, column_id))


async def create_column(state: AppState, principal: Principal, table_ref: int | str, body: ColumnIn) -> dict[str, Any]:
    """Add a column; existing rows get its values by a backfill run (docs/backfills.md),
    answered as ``backfill``."""
    require_writable(principal)
    schema = await state.schema(principal.workspace_id)
    table = table_or_404(schema, table_ref)
    require_manage(principal, table)
    spec = parse_new_column(body.model_dump(exclude_unset=True, exclude={"backfill"}), schema, table)
    check_computed_columns([spec], table, schema=schema)
    await check_column_hosts(state, principal.workspace_id, [spec])
    async with schema_change(state, principal.workspace_id) as conn:
        col = await meta.create_column(conn, workspace_id=principal.workspace_id, table_id=table.id, spec=spec)
    # existing rows get the new column's values (docs/backfills.md)
    backfill = await backfill_after_change(state, principal, table.id, col.id, before=None,
                                           requested=body.backfill)
    return column_out(col) | {"backfill": backfill}


async def update_column(
    state: AppState, principal: Principal, table_ref: int | str, column_id: int, body: ColumnPatch
) -> dict[str, Any]:
    """Rename a column or change its type, options, formula, config or required flag;
    ``conversion`` reports values converted or cleared, ``backfill`` the recompute run."""
    require_writable(principal)
    schema = await state.schema(principal.workspace_id)
    table = table_or_404(schema, table_ref)
    require_manage(principal, table)
    current = column_or_404(table, column_id)
    data = body.model_dump(exclude_unset=True, exclude={"backfill"})
    allow_loss = bool(data.pop("allow_loss", False))
    if not data:
        raise ValidationError("nothing to change: send name, type, required, options, formula or config")
    spec = parse_column_patch(data, meta.spec_of(current), schema, table)
    if (spec.name != current.name or spec.type is not current.type) and await _sign_in_column(state, table, current):
        raise Conflict(f"{table.name}.{current.name} is the e-mail the workspace's app users sign in with:"
                       " it keeps its name and type")
    untouched = spec.type is current.type and spec.formula == current.formula and spec.config == current.config
    if not (current.broken and untouched):  # a broken column may be renamed before it is fixed
        # a config sent (or a new kind) is checked key by key; a stored one kept as it is
        # (a rename, a formula edit) is not refused for keys that were allowed when stored
        check_computed_columns([spec], table, replacing=current.id, schema=schema,
                               config_keys="config" in data or spec.type is not current.type)
    await check_column_hosts(state, principal.workspace_id, [spec])
    report: dict[str, int] = {}  # filled when values are converted or cleared
    async with schema_change(state, principal.workspace_id) as conn:
        col = await meta.update_column(conn, workspace_id=principal.workspace_id, current=current, spec=spec,
                                       allow_loss=allow_loss, report=report)
    backfill = await backfill_after_change(state, principal, table.id, col.id, before=current,
                                           requested=body.backfill)
    # values converted in place are embedded again (a run of kind embeddings)
    embeddings = await semantic_search.after_column_change(state, table, current, col)
    return {**column_out(col), **({"conversion": report} if report else {}), "backfill": backfill,
            **({"embeddings": embeddings} if embeddings else {})}


async def delete_column(
    state: AppState, principal: Principal, table_ref: int | str, column_id: int, *, force: bool = False
) -> dict[str, Any]:
    """Delete a column and its values.

    A column that anything uses (computed columns, views, relation labels, semantic
    search, schedules) is refused with ``COLUMN_IN_USE`` listing ``dependents``; ``force``
    deletes it anyway (views lose those terms, dependent computed columns are marked
    broken until edited) and the answer lists them as ``detached``.
    """
    require_writable(principal)
    schema = await state.schema(principal.workspace_id)
    table = table_or_404(schema, table_ref)
    require_manage(principal, table)
    col = column_or_404(table, column_id)
    if await _sign_in_column(state, table, col):
        raise Conflict(f"{table.name}.{col.name} is the e-mail the workspace's app users sign in with: it cannot be"
                       " deleted while they have accounts")
    async with schema_change(state, principal.workspace_id) as conn:
        users = await dependents.column_dependents(conn, schema=schema, table=table, column=col)
        if users and not force:
            raise ColumnInUse(
                f"column {col.name!r} is used by {len(users)} other item(s); change them first,"
                " or delete with ?force=true",
                extra={"dependents": users},
            )
        if users:
            await dependents.detach_column(conn, table=table, column=col, dependents=users)
        await meta.delete_column(conn, workspace_id=principal.workspace_id, col=col)
    out: dict[str, Any] = {"id": col.id, "deleted": True}
    if any(d["kind"] == "semantic_search" for d in users):  # the records' embedded text lost a column
        embeddings = await semantic_search.embed_again(state, principal.workspace_id, table.id)
        if embeddings:
            out["embeddings"] = embeddings
    if users:
        out["detached"] = users
        broken = [d["id"] for d in users if d["kind"] == "column" and d.get("table_id") == table.id]
        out["backfill"] = await recompute_readers(state, principal, table.id, broken)
    return out


async def recompute_readers(state: AppState, principal: Principal, table_id: int,
                            cleared: list[int]) -> dict[str, Any] | None:
    """After columns of ``table_id`` were marked broken and their values cleared (a forced
    delete of what they read): recompute the computed columns reading them, transitively,
    whose values were computed from the cleared ones (else they stay as they were, wrong).
    The broken columns run too, so every row ends as a new record would: the broken column
    null with its reason, its readers skipped (null). Kinds without side effects only, as
    any backfill after a change; call after commit."""
    table = (await state.schema(principal.workspace_id)).tables.get(table_id)
    if table is None or not cleared:
        return None
    readers = dependant_ids(table, cleared) - set(cleared)
    pure = {c.id for c in table.columns if c.id in readers and c.type in PURE_KINDS}
    if not pure:
        return None
    return await start_backfill(state, principal, table, [c.id for c in table.columns if c.id in pure or c.id in cleared])


async def _sign_in_column(state: AppState, table: TableMeta, col: ColumnMeta) -> bool:
    """Whether ``col`` is the Email column app users of the workspace sign up and sign in
    with (sign-up writes it by name: renamed, retyped or deleted, every sign-up failed)."""
    if table.name != appusers.USERS_TABLE or col.name != appusers.EMAIL_COLUMN:
        return False
    async with state.db.connection() as conn:
        return await appusers.has_accounts(conn, table_id=table.id)


async def reorder_columns(
    state: AppState, principal: Principal, table_ref: int | str, columns: list[int | str]
) -> dict[str, Any]:
    """Listed columns (ids or names) first, in the given order; the others keep their
    relative order after."""
    table = await table_for(state, principal, table_ref, Action.READ)
    require_manage(principal, table)
    listed = [column_ref(table, ref).id for ref in columns]
    if len(set(listed)) != len(listed):
        raise ValidationError("a column is listed twice")
    rest = [c.id for c in sorted(table.columns, key=lambda c: c.position) if c.id not in set(listed)]
    order = listed + rest
    async with schema_change(state, principal.workspace_id) as conn:
        await conn.execute(
            "UPDATE wds.columns c SET position = o.pos - 1, updated_at = now()"
            " FROM unnest(%s::bigint[]) WITH ORDINALITY AS o(id, pos)"
            " WHERE c.id = o.id AND c.table_id = %s",
            (order, table.id),
        )
    fresh = table_or_404(await state.schema(principal.workspace_id), table.id)
    return {"table_id": fresh.id, "columns": [column_out(c) for c in fresh.columns]}
