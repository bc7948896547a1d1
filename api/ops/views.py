"""Saved views of a table, for every door (REST ``{rest}/tables/{id}/views``, the MCP
builder's view tools, ``?view=`` on record listings).

Reading views needs read permission on the table; changing them needs full access to it
(like other changes to a table's definition). The rules for ``config`` per view type are
in :mod:`storage.views`.
"""

from __future__ import annotations

from typing import Any

from api.deps import require_writable
from api.ops.access import require_manage, table_for
from api.state import AppState
from storage import views
from storage.access import Action, Principal
from storage.errors import NotFound
from storage.query import Query
from storage.schema import TableMeta


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


async def list_views(state: AppState, principal: Principal, table_ref: int | str) -> list[dict[str, Any]]:
    """The table's views, as :func:`storage.views.view_out` shapes them."""
    table = await table_for(state, principal, table_ref, Action.READ)
    async with state.db.connection() as conn:
        rows = await views.list_views(conn, workspace_id=principal.workspace_id, table_id=table.id)
    return [views.view_out(r, table) for r in rows]


async def get_view(state: AppState, principal: Principal, table_ref: int | str, view_id: int) -> dict[str, Any]:
    """One view. Raises NotFound for a view this table does not have."""
    table = await table_for(state, principal, table_ref, Action.READ)
    async with state.db.connection() as conn:
        row = await views.get_view(conn, workspace_id=principal.workspace_id, table_id=table.id, view_id=view_id)
    if row is None:
        raise NotFound(f"view {view_id} not found on table {table.id}")
    return views.view_out(row, table)


async def create_view(state: AppState, principal: Principal, table_ref: int | str, *, name: str,
                      view_type: str, config: dict[str, Any]) -> dict[str, Any]:
    """Create a view; ``config`` is checked against the table for the view type.

    Raises:
        ValidationError: a bad name, type or config (400); Forbidden without full access.
    """
    require_writable(principal)
    table = await table_for(state, principal, table_ref, Action.READ)
    require_manage(principal, table)
    checked_name = views.view_name(name)
    checked = views.validate_view(table=table, view_type=view_type, config=config)
    async with state.db.connection() as conn:
        row = await views.create_view(
            conn, workspace_id=principal.workspace_id, table_id=table.id,
            name=checked_name, view_type=view_type, config=checked,
        )
    if row is None:
        raise NotFound(f"table {table_ref} not found")
    return views.view_out(row, table)


async def update_view(state: AppState, principal: Principal, table_ref: int | str, view_id: int,
                      changes: dict[str, Any]) -> dict[str, Any]:
    """Rename a view, or change its type and/or config (the result is validated whole).
    ``changes`` holds only the sent keys among ``name``, ``view_type`` and ``config``; a
    ``None`` type or config keeps the current one."""
    require_writable(principal)
    table = await table_for(state, principal, table_ref, Action.READ)
    require_manage(principal, table)
    async with state.db.connection() as conn:
        current = await views.get_view(conn, workspace_id=principal.workspace_id, table_id=table.id, view_id=view_id)
        if current is None:
            raise NotFound(f"view {view_id} not found on table {table.id}")
        stored: dict[str, Any] = {}
        if "name" in changes:
            stored["name"] = views.view_name(changes["name"])
        if "view_type" in changes or "config" in changes:
            view_type = changes.get("view_type")
            view_type = view_type if view_type is not None else current["view_type"]
            config = changes.get("config")
            config = config if config is not None else views.decoded(current, table)["config"]
            stored["view_type"] = view_type
            stored["config"] = views.validate_view(table=table, view_type=view_type, config=config)
        row = await views.update_view(
            conn, workspace_id=principal.workspace_id, table_id=table.id, view_id=view_id, changes=stored
        )
    if row is None:
        raise NotFound(f"view {view_id} not found on table {table.id}")
    return views.view_out(row, table)


async def delete_view(state: AppState, principal: Principal, table_ref: int | str, view_id: int) -> dict[str, Any]:
    """Delete a view: ``{id, deleted: true}``."""
    require_writable(principal)
    table = await table_for(state, principal, table_ref, Action.READ)
    require_manage(principal, table)
    async with state.db.connection() as conn:
        row = await views.delete_view(conn, workspace_id=principal.workspace_id, table_id=table.id, view_id=view_id)
    if row is None:
        raise NotFound(f"view {view_id} not found on table {table.id}")
    return {"id": row["id"], "deleted": True}


async def list_views_published(state: AppState, principal: Principal, table_ref: int | str) -> dict[str, Any]:
    """The table's views with their publication columns (``published``, ``share_id``), as
    the MCP ``list_views`` tool lists them: ``{table: {id, name}, views}``."""
    table = await table_for(state, principal, table_ref, Action.READ)
    async with state.db.connection() as conn:
        cur = await conn.execute(
            "SELECT id, name, view_type, config, published, share_id, created_at, updated_at"
            " FROM wds.views WHERE workspace_id = %s AND table_id = %s ORDER BY id",
            (principal.workspace_id, table.id),
        )
        rows = [views.decoded(r, table) for r in await cur.fetchall()]
    return {"table": {"id": table.id, "name": table.name}, "views": rows}
