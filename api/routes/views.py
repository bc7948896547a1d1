"""Saved views of a table: list, get, create, patch, delete (``{rest}/tables/{id}/views``).

Reading views needs read permission on the table; changing them needs full access to it
(like other changes to a table's definition). The rules for ``config`` per view type are
in :mod:`storage.views`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from api.deps import RestPrincipal, StateDep, require, require_writable, table_or_404
from api.ops.access import require_manage
from api.responses import JSON
from api.schemas import ERRORS, Deleted
from api.state import AppState
from storage import views
from storage.access import Action, Principal
from storage.errors import NotFound
from storage.query import Query
from storage.schema import TableMeta

router = APIRouter(prefix="/functions/v1/rest-api/tables/{table_id}/views", tags=["views"])


class ViewIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    view_type: str = Field(description="grid, kanban, gallery, calendar, timeline, form or custom")
    config: dict[str, Any] = Field(default_factory=dict, description="per view type; see the views guide")


class ViewPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    view_type: str | None = None
    config: dict[str, Any] | None = Field(None, description="replaces the whole config")


class ViewOut(BaseModel):
    id: int
    table_id: int
    name: str
    view_type: str
    config: dict[str, Any]
    created_at: str
    updated_at: str


async def _table(state: AppState, principal: Principal, table_id: int) -> TableMeta:
    table = table_or_404(await state.schema(principal.workspace_id), table_id)
    require(principal, table, Action.READ)
    return table


async def view_query(state: AppState, principal: Principal, table: TableMeta, view_ref: str, query: Query) -> Query:
    """``?view=<id>`` on a record listing: ``query`` with the view's filters and sort.

    Raises:
        NotFound: no view with that id on this table.
    """
    view = None
    if view_ref.isascii() and view_ref.isdigit() and len(view_ref) <= 18:
        async with state.db.connection() as conn:
            view = await views.get_view(
                conn, workspace_id=principal.workspace_id, table_id=table.id, view_id=int(view_ref)
            )
    if view is None:
        raise NotFound(f"view {view_ref} not found on table {table.id}")
    return views.apply_view(query, view=view, table=table)


@router.get("", response_model=list[ViewOut], responses=ERRORS)
async def list_views(table_id: int, principal: RestPrincipal, state: StateDep) -> JSON:
    table = await _table(state, principal, table_id)
    async with state.db.connection() as conn:
        rows = await views.list_views(conn, workspace_id=principal.workspace_id, table_id=table.id)
    return JSON([views.view_out(r, table) for r in rows])


@router.get("/{view_id}", response_model=ViewOut, responses=ERRORS)
async def get_view(table_id: int, view_id: int, principal: RestPrincipal, state: StateDep) -> JSON:
    table = await _table(state, principal, table_id)
    async with state.db.connection() as conn:
        row = await views.get_view(conn, workspace_id=principal.workspace_id, table_id=table.id, view_id=view_id)
    if row is None:
        raise NotFound(f"view {view_id} not found on table {table.id}")
    return JSON(views.view_out(row, table))


@router.post("", status_code=201, response_model=ViewOut, responses=ERRORS)
async def create_view(table_id: int, body: ViewIn, principal: RestPrincipal, state: StateDep) -> JSON:
    """Create a view; `config` is checked against the table for the view type (400 otherwise)."""
    require_writable(principal)
    table = await _table(state, principal, table_id)
    require_manage(principal, table)
    name = views.view_name(body.name)
    config = views.validate_view(table=table, view_type=body.view_type, config=body.config)
    async with state.db.connection() as conn:
        row = await views.create_view(
            conn, workspace_id=principal.workspace_id, table_id=table.id,
            name=name, view_type=body.view_type, config=config,
        )
    if row is None:
        raise NotFound(f"table {table_id} not found")
    return JSON(views.view_out(row, table), status_code=201)


@router.patch("/{view_id}", response_model=ViewOut, responses=ERRORS)
async def patch_view(table_id: int, view_id: int, body: ViewPatch, principal: RestPrincipal, state: StateDep) -> JSON:
    """Rename a view, or change its type and/or config (the result is validated whole)."""
    require_writable(principal)
    table = await _table(state, principal, table_id)
    require_manage(principal, table)
    sent = body.model_dump(exclude_unset=True)
    async with state.db.connection() as conn:
        current = await views.get_view(conn, workspace_id=principal.workspace_id, table_id=table.id, view_id=view_id)
        if current is None:
            raise NotFound(f"view {view_id} not found on table {table.id}")
        changes: dict[str, Any] = {}
        if "name" in sent:
            changes["name"] = views.view_name(body.name)
        if "view_type" in sent or "config" in sent:
            view_type = body.view_type if body.view_type is not None else current["view_type"]
            config = body.config if body.config is not None else views.decoded(current, table)["config"]
            changes["view_type"] = view_type
            changes["config"] = views.validate_view(table=table, view_type=view_type, config=config)
        row = await views.update_view(
            conn, workspace_id=principal.workspace_id, table_id=table.id, view_id=view_id, changes=changes
        )
    if row is None:
        raise NotFound(f"view {view_id} not found on table {table.id}")
    return JSON(views.view_out(row, table))


@router.delete("/{view_id}", response_model=Deleted, responses=ERRORS)
async def delete_view(table_id: int, view_id: int, principal: RestPrincipal, state: StateDep) -> JSON:
    require_writable(principal)
    table = await _table(state, principal, table_id)
    require_manage(principal, table)
    async with state.db.connection() as conn:
        row = await views.delete_view(conn, workspace_id=principal.workspace_id, table_id=table.id, view_id=view_id)
    if row is None:
        raise NotFound(f"view {view_id} not found on table {table.id}")
    return JSON({"id": row["id"], "deleted": True})
