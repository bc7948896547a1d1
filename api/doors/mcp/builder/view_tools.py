"""Builder tools for saved views and publishing them (a public read-only page or a form).

View CRUD is the REST door's operations (:mod:`api.ops.views`: the same validation of
``config`` per view type);
publishing sets ``share_id``/``published`` on the view, served by ``api/doors/rest/publish.py``
(its share URL from :mod:`api.ops.publish`).
"""

from __future__ import annotations

import secrets
from typing import Any

from api.doors.mcp.builder.common import builder, model, pick, positive_id
from api.doors.mcp.spec import (
    DELETED_OUT,
    TABLE_ID,
    ToolSpec,
    any_object,
    integer,
    jsonable,
    obj,
    out,
    string,
)
from api.ops import views as ops_views
from api.ops.access import require_manage, table_for
from api.ops.publish import share_url
from api.schemas import ViewIn, ViewPatch
from api.state import AppState
from storage.access import Action, Principal
from storage.errors import NotFound, ValidationError
from storage.views import VIEW_TYPES

_VIEW_ID = integer("the view's id")
_CONFIG = any_object(
    "per view type: grid/kanban/gallery/calendar/timeline take filters {Col: \"op.value\"} or [{column, op, value}, ...] (several conditions on one column), sort \"Col.desc\","
    " hidden_columns [names], column_order [names]; kanban needs group_by (single_select), calendar"
    " date_column, timeline start_column (end_column optional), gallery cover_column (file); form needs"
    " fields [data column names incl. every required one] and may set title, description, submit_label;"
    " custom takes any object"
)
_VIEW_OUT = out({"id": {"type": "integer"}, "name": {"type": "string"}, "view_type": {"type": "string"},
                 "config": {"type": "object"}}, ("id", "name", "view_type"))
_PUBLISH_OUT = out({"view_id": {"type": "integer"}, "published": {"type": ["string", "null"]},
                    "share_id": {"type": ["string", "null"]}, "url": {"type": ["string", "null"]}},
                   ("view_id", "published"))


async def create_view(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table = await table_for(state, principal, args["table_id"], Action.READ)
    body = model(ViewIn, pick(args, "name", "view_type", "config"))
    return await ops_views.create_view(state, principal, table.id, name=body.name, view_type=body.view_type,
                                       config=body.config)


async def update_view(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table = await table_for(state, principal, args["table_id"], Action.READ)
    changes = pick(args, "name", "view_type", "config")
    if not changes:
        raise ValidationError("nothing to change: send name, view_type or config")
    body = model(ViewPatch, changes)
    return await ops_views.update_view(state, principal, table.id, positive_id(args["view_id"], "view_id"),
                                       body.model_dump(exclude_unset=True))


async def delete_view(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table = await table_for(state, principal, args["table_id"], Action.READ)
    return await ops_views.delete_view(state, principal, table.id, positive_id(args["view_id"], "view_id"))


async def get_view(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table = await table_for(state, principal, args["table_id"], Action.READ)
    view = await ops_views.get_view(state, principal, table.id, positive_id(args["view_id"], "view_id"))
    return {**view, **(await _status(state, principal, table.id, view["id"]))}


async def _status(state: AppState, principal: Principal, table_id: int, view_id: int) -> dict[str, Any]:
    async with state.db.connection() as conn:
        cur = await conn.execute(
            "SELECT id, published, share_id FROM wds.views WHERE id = %s AND table_id = %s AND workspace_id = %s",
            (view_id, table_id, principal.workspace_id),
        )
        row = await cur.fetchone()
    if row is None:
        raise NotFound(f"view {view_id} not found on table {table_id}")
    return _publication(state, row)


def _publication(state: AppState, row: dict[str, Any]) -> dict[str, Any]:
    share = row["share_id"] if row["published"] else None
    return {"view_id": row["id"], "published": row["published"], "share_id": share,
            "url": share_url(state.settings, share) if share else None}


async def publish_view(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table = await table_for(state, principal, args["table_id"], Action.READ)
    require_manage(principal, table)
    view_id = positive_id(args["view_id"], "view_id")
    async with state.db.connection() as conn:
        cur = await conn.execute(
            "SELECT view_type FROM wds.views WHERE id = %s AND table_id = %s AND workspace_id = %s",
            (view_id, table.id, principal.workspace_id),
        )
        row = await cur.fetchone()
        if row is None:
            raise NotFound(f"view {view_id} not found on table {table.id}")
        is_form = row["view_type"] == "form"
        mode = args.get("mode") or ("form" if is_form else "view")
        if (mode == "form") != is_form:
            raise ValidationError("only a form view is published as a form; other views publish as 'view'")
        # keep an existing share id so links handed out stay valid across re-publishing
        cur = await conn.execute(
            "UPDATE wds.views SET published = %s, share_id = coalesce(share_id, %s), updated_at = now()"
            " WHERE id = %s RETURNING id, published, share_id",
            (mode, secrets.token_urlsafe(12), view_id),
        )
        updated = await cur.fetchone()
    assert updated is not None
    return _publication(state, updated)


async def unpublish_view(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table = await table_for(state, principal, args["table_id"], Action.READ)
    require_manage(principal, table)
    view_id = positive_id(args["view_id"], "view_id")
    async with state.db.connection() as conn:
        # a fresh share id on the next publish: the old public link must stop working
        cur = await conn.execute(
            "UPDATE wds.views SET published = NULL, share_id = NULL, updated_at = now()"
            " WHERE id = %s AND table_id = %s AND workspace_id = %s RETURNING id, published, share_id",
            (view_id, table.id, principal.workspace_id),
        )
        row = await cur.fetchone()
    if row is None:
        raise NotFound(f"view {view_id} not found on table {table.id}")
    return _publication(state, row)


async def get_publish_status(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table = await table_for(state, principal, args["table_id"], Action.READ)
    return await _status(state, principal, table.id, positive_id(args["view_id"], "view_id"))


async def list_published(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    async with state.db.connection() as conn:
        cur = await conn.execute(
            "SELECT v.id, v.table_id, v.name, v.view_type, v.published, v.share_id, v.updated_at"
            " FROM wds.views v WHERE v.workspace_id = %s AND v.published IS NOT NULL ORDER BY v.id",
            (principal.workspace_id,),
        )
        rows = await cur.fetchall()
    return {"published": [{**jsonable(r), **_publication(state, r)} for r in rows]}


_VIEW_REF = {"table_id": TABLE_ID, "view_id": _VIEW_ID}

VIEW_TOOLS: list[ToolSpec] = [
    builder("create_view", "Create a view", "Save a view of a table: {name, view_type, config}.",
            create_view, obj({"table_id": TABLE_ID, "name": string("view name, unique in the table"),
                              "view_type": string("the kind of view", enum=list(VIEW_TYPES)), "config": _CONFIG},
                             ("table_id", "name", "view_type")), _VIEW_OUT),
    builder("update_view", "Update a view", "Rename a view or replace its type and/or config.",
            update_view, obj({**_VIEW_REF, "name": string("new name"),
                              "view_type": string("new type", enum=list(VIEW_TYPES)),
                              "config": _CONFIG}, ("table_id", "view_id")), _VIEW_OUT, idempotent=True),
    builder("delete_view", "Delete a view", "Delete a saved view (its public page, if any, goes too).",
            delete_view, obj(_VIEW_REF, ("table_id", "view_id")), DELETED_OUT, destructive=True, idempotent=True),
    builder("get_view", "Get a view", "A saved view with its config and publication status.",
            get_view, obj(_VIEW_REF, ("table_id", "view_id")), _VIEW_OUT, read_only=True, idempotent=True),
    builder("publish_view", "Publish a view",
            "Make a view readable without a token at {base_url}/p/<share_id> (only its visible columns), or a"
            " form view a public form whose submissions create records through the normal write path.",
            publish_view, obj({**_VIEW_REF, "mode": string("'view' (read-only page) or 'form'; default from the"
                                                           " view type", enum=["view", "form"])},
                              ("table_id", "view_id")), _PUBLISH_OUT, idempotent=True),
    builder("unpublish_view", "Unpublish a view", "Take a view's public page or form offline; its link dies.",
            unpublish_view, obj(_VIEW_REF, ("table_id", "view_id")), _PUBLISH_OUT, destructive=True,
            idempotent=True),
    builder("get_publish_status", "Publication status", "Whether a view is published, and its public URL.",
            get_publish_status, obj(_VIEW_REF, ("table_id", "view_id")), _PUBLISH_OUT, read_only=True,
            idempotent=True),
    builder("list_published", "List published views", "Every published view and form of the workspace.",
            list_published, obj({}), out({"published": {"type": "array"}}, ("published",)), read_only=True,
            idempotent=True),
]
