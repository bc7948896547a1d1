"""Columns: list, get, create, patch (rename, options, formula, type), delete — REST over
:mod:`api.ops.columns`."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import RestPrincipal, StateDep
from api.ops import columns as ops
from api.responses import JSON
from api.schemas import ERRORS, ColumnIn, ColumnOut, ColumnPatch, ColumnPatchOut, Deleted, LossyChangeOut

router = APIRouter(prefix="/functions/v1/rest-api/tables/{table_id}/columns", tags=["columns"])


@router.get("", response_model=list[ColumnOut], responses=ERRORS)
async def list_columns(table_id: int, principal: RestPrincipal, state: StateDep) -> JSON:
    return JSON(await ops.list_columns(state, principal, table_id))


@router.get("/{column_id}", response_model=ColumnOut, responses=ERRORS)
async def get_column(table_id: int, column_id: int, principal: RestPrincipal, state: StateDep) -> JSON:
    return JSON(await ops.get_column(state, principal, table_id, column_id))


@router.post("", status_code=201, response_model=ColumnOut, responses=ERRORS)
async def create_column(table_id: int, body: ColumnIn, principal: RestPrincipal, state: StateDep) -> JSON:
    return JSON(await ops.create_column(state, principal, table_id, body), status_code=201)


@router.patch("/{column_id}", response_model=ColumnPatchOut, responses={**ERRORS, 409: {"model": LossyChangeOut}})
async def patch_column(
    table_id: int, column_id: int, body: ColumnPatch, principal: RestPrincipal, state: StateDep
) -> JSON:
    return JSON(await ops.update_column(state, principal, table_id, column_id, body))


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
    return JSON(await ops.delete_column(state, principal, table_id, column_id, force=force))
