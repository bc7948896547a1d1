"""Columns: list, get, create, patch (rename, options, formula, type), delete."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.backfill import backfill_after_change
from api.deps import RestPrincipal, StateDep, require, require_writable, table_or_404
from api.ops.access import require_manage
from api.ops.schema_tx import check_column_hosts, schema_change
from api.responses import JSON
from api.schemas import ERRORS, ColumnIn, ColumnOut, ColumnPatch, ColumnPatchOut, Deleted, LossyChangeOut
from api.serialize import column_out
from storage import dependents, meta
from storage.access import Action
from storage.columnspec import parse_column_patch, parse_new_column
from storage.errors import ColumnInUse, NotFound, ValidationError
from storage.pipelines import check_computed_columns
from storage.schema import ColumnMeta, TableMeta

router = APIRouter(prefix="/functions/v1/rest-api/tables/{table_id}/columns", tags=["columns"])


def column_or_404(table: TableMeta, column_id: int) -> ColumnMeta:
    col = table.column_by_id(column_id)
    if col is None:
        raise NotFound(f"column {column_id} not found in table {table.id}")
    return col


@router.get("", response_model=list[ColumnOut], responses=ERRORS)
async def list_columns(table_id: int, principal: RestPrincipal, state: StateDep) -> JSON:
    table = table_or_404(await state.schema(principal.workspace_id), table_id)
    require(principal, table, Action.READ)
    return JSON([column_out(c) for c in table.columns])


@router.get("/{column_id}", response_model=ColumnOut, responses=ERRORS)
async def get_column(table_id: int, column_id: int, principal: RestPrincipal, state: StateDep) -> JSON:
    table = table_or_404(await state.schema(principal.workspace_id), table_id)
    require(principal, table, Action.READ)
    return JSON(column_out(column_or_404(table, column_id)))


@router.post("", status_code=201, response_model=ColumnOut, responses=ERRORS)
async def create_column(table_id: int, body: ColumnIn, principal: RestPrincipal, state: StateDep) -> JSON:
    require_writable(principal)
    schema = await state.schema(principal.workspace_id)
    table = table_or_404(schema, table_id)
    require_manage(principal, table)
    spec = parse_new_column(body.model_dump(exclude_unset=True, exclude={"backfill"}), schema, table)
    check_computed_columns([spec], table, schema=schema)
    await check_column_hosts(state, principal.workspace_id, [spec])
    async with schema_change(state, principal.workspace_id) as conn:
        col = await meta.create_column(conn, workspace_id=principal.workspace_id, table_id=table.id, spec=spec)
    # existing rows get the new column's values (docs/backfills.md)
    backfill = await backfill_after_change(state, principal, table.id, col.id, before=None,
                                           requested=body.backfill)
    return JSON(column_out(col) | {"backfill": backfill}, status_code=201)


@router.patch("/{column_id}", response_model=ColumnPatchOut, responses={**ERRORS, 409: {"model": LossyChangeOut}})
async def patch_column(
    table_id: int, column_id: int, body: ColumnPatch, principal: RestPrincipal, state: StateDep
) -> JSON:
    require_writable(principal)
    schema = await state.schema(principal.workspace_id)
    table = table_or_404(schema, table_id)
    require_manage(principal, table)
    current = column_or_404(table, column_id)
    data = body.model_dump(exclude_unset=True, exclude={"backfill"})
    allow_loss = bool(data.pop("allow_loss", False))
    if not data:
        raise ValidationError("nothing to change: send name, type, required, options, formula or config")
    spec = parse_column_patch(data, meta.spec_of(current), schema, table)
    untouched = spec.type is current.type and spec.formula == current.formula and spec.config == current.config
    if not (current.broken and untouched):  # a broken column may be renamed before it is fixed
        check_computed_columns([spec], table, replacing=current.id, schema=schema)
    await check_column_hosts(state, principal.workspace_id, [spec])
    report: dict[str, int] = {}  # filled when values are converted or cleared
    async with schema_change(state, principal.workspace_id) as conn:
        col = await meta.update_column(conn, workspace_id=principal.workspace_id, current=current, spec=spec,
                                       allow_loss=allow_loss, report=report)
    backfill = await backfill_after_change(state, principal, table.id, col.id, before=current,
                                           requested=body.backfill)
    return JSON({**column_out(col), **({"conversion": report} if report else {}), "backfill": backfill})


@router.delete("/{column_id}", response_model=Deleted, responses=ERRORS)
async def delete_column(
    table_id: int, column_id: int, principal: RestPrincipal, state: StateDep, force: bool = False
) -> JSON:
    """Delete a column and its values.

    A column that anything uses (computed columns, views, relation labels, semantic
    search, schedules) is refused with 409 `COLUMN_IN_USE` listing `dependents`;
    `?force=true` deletes it anyway (views lose those terms, dependent computed columns
    are marked broken until edited).
    """
    require_writable(principal)
    schema = await state.schema(principal.workspace_id)
    table = table_or_404(schema, table_id)
    require_manage(principal, table)
    col = column_or_404(table, column_id)
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
    if users:
        out["detached"] = users
    return JSON(out)
