"""Resolving a table for a principal and enforcing its grants, for every door."""

from __future__ import annotations

from typing import Any

from api.deps import require, table_or_404
from api.state import AppState
from storage.access import Action, Principal
from storage.errors import Forbidden
from storage.schema import TableMeta


async def table_for(state: AppState, principal: Principal, ref: Any, action: Action) -> TableMeta:
    """Resolve a table reference (id or name) and enforce the grant exactly as REST does."""
    table = table_or_404(await state.schema(principal.workspace_id), ref)
    require(principal, table, action)
    return table


def require_manage(principal: Principal, table: TableMeta) -> None:
    """Schema changes need every right on the table (its creator, a full grant, or the builder)."""
    perms = principal.perms(table.id)
    if not (perms.read and perms.create and perms.update and perms.delete):
        raise Forbidden(f"changing table {table.name!r} needs full access to it")
