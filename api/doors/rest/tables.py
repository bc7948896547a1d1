"""Tables: list, create (with columns), get, patch, delete — REST over :mod:`api.ops.tables`."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import RestPrincipal, StateDep
from api.ops import tables as ops
from api.responses import JSON
from api.schemas import ERRORS, Deleted, TableIn, TableOut, TablePatch, TableSummary

router = APIRouter(prefix="/functions/v1/rest-api", tags=["tables"])


@router.get("/tables", response_model=list[TableSummary], responses=ERRORS)
async def list_tables(principal: RestPrincipal, state: StateDep) -> JSON:
    """Tables the token can read."""
    return JSON(await ops.list_tables(state, principal))


@router.post("/tables", status_code=201, response_model=TableOut, responses=ERRORS)
async def create_table(body: TableIn, principal: RestPrincipal, state: StateDep) -> JSON:
    """Create a table with its columns; the creating token gets full access to it."""
    return JSON(await ops.create_table(state, principal, body), status_code=201)


@router.get("/tables/{table_id}", response_model=TableOut, responses=ERRORS)
async def get_table(table_id: int, principal: RestPrincipal, state: StateDep) -> JSON:
    return JSON(await ops.get_table(state, principal, table_id))


@router.patch("/tables/{table_id}", response_model=TableOut, responses=ERRORS)
async def patch_table(table_id: int, body: TablePatch, principal: RestPrincipal, state: StateDep) -> JSON:
    """Rename a table, change its icon, or set its semantic-search columns."""
    return JSON(await ops.update_table(state, principal, table_id, body))


@router.delete("/tables/{table_id}", response_model=Deleted, responses=ERRORS)
async def delete_table(table_id: int, principal: RestPrincipal, state: StateDep, force: bool = False) -> JSON:
    """Drop the table and all its records (irreversible).

    Refused with 409 `COLUMN_IN_USE` (listing `dependents`) while columns of other tables
    point at it (relations, record steps), including what uses those relation columns;
    `?force=true` drops it anyway: those relation columns go with it (computed columns
    reading them are marked broken, views lose them), computed columns that used the
    table are marked broken, and the answer lists them in `detached`.
    """
    return JSON(await ops.delete_table(state, principal, table_id, force=force))
