"""Saved views of a table: list, get, create, patch, delete (``{rest}/tables/{id}/views``).

The operations (permissions, validation of ``config`` per view type) are in
:mod:`api.ops.views`; the request models in :mod:`api.schemas`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from api.deps import RestPrincipal, StateDep
from api.ops import views as ops
from api.responses import JSON
from api.schemas import ERRORS, Deleted, ViewIn, ViewPatch

router = APIRouter(prefix="/functions/v1/rest-api/tables/{table_id}/views", tags=["views"])


class ViewOut(BaseModel):
    id: int
    table_id: int
    name: str
    view_type: str
    config: dict[str, Any]
    created_at: str
    updated_at: str


@router.get("", response_model=list[ViewOut], responses=ERRORS)
async def list_views(table_id: int, principal: RestPrincipal, state: StateDep) -> JSON:
    return JSON(await ops.list_views(state, principal, table_id))


@router.get("/{view_id}", response_model=ViewOut, responses=ERRORS)
async def get_view(table_id: int, view_id: int, principal: RestPrincipal, state: StateDep) -> JSON:
    return JSON(await ops.get_view(state, principal, table_id, view_id))


@router.post("", status_code=201, response_model=ViewOut, responses=ERRORS)
async def create_view(table_id: int, body: ViewIn, principal: RestPrincipal, state: StateDep) -> JSON:
    """Create a view; `config` is checked against the table for the view type (400 otherwise)."""
    return JSON(await ops.create_view(state, principal, table_id, name=body.name, view_type=body.view_type,
                                      config=body.config), status_code=201)


@router.patch("/{view_id}", response_model=ViewOut, responses=ERRORS)
async def patch_view(table_id: int, view_id: int, body: ViewPatch, principal: RestPrincipal, state: StateDep) -> JSON:
    """Rename a view, or change its type and/or config (the result is validated whole)."""
    return JSON(await ops.update_view(state, principal, table_id, view_id, body.model_dump(exclude_unset=True)))


@router.delete("/{view_id}", response_model=Deleted, responses=ERRORS)
async def delete_view(table_id: int, view_id: int, principal: RestPrincipal, state: StateDep) -> JSON:
    return JSON(await ops.delete_view(state, principal, table_id, view_id))
