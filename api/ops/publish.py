"""Published views and forms (share links): what ``{base_url}/p/<share_id>`` serves.

A share is anonymous (no principal): the share id itself is the capability. A published
*view* shows one page of its records with only the view's visible columns
(``column_order`` minus ``hidden_columns``; every column when neither is set), filtered
and sorted as the view says. A published *form* describes its fields and accepts
submissions that create a record through the normal write path: only the form's fields,
required columns enforced, computed columns run with create rights on the form's table
only. Submissions are limited per share and client address (a moving one-minute window
per API process) and refused on read-only plans.

The REST door (``api/doors/rest/publish.py``) parses the request and renders JSON or HTML.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any

from api.ops import records as record_ops
from api.state import AppState
from service.config import Settings
from storage import views
from storage.access import Perms, Principal, TokenType
from storage.errors import Forbidden, NotFound, RateLimited, ServiceError, UnknownColumn
from storage.query import Query as RecordQuery
from storage.query import list_records, plan_query
from storage.schema import ColumnMeta, TableMeta
from storage.views import apply_view

PAGE_SIZE = 100
SUBMISSIONS_PER_MINUTE = 30
_recent: dict[tuple[str, str], deque[float]] = defaultdict(deque)


def share_url(settings: Settings, share_id: str) -> str:
    return f"{settings.public_base_url.rstrip('/')}/p/{share_id}"


@dataclass(frozen=True)
class PublishedForm:
    """A published form ready to take submissions: its view row, table and field list."""

    share_id: str
    view: dict[str, Any]
    table: TableMeta
    form: dict[str, Any]


_SHARE_ID = re.compile(r"[A-Za-z0-9_-]+")


async def _load(state: AppState, share_id: str) -> tuple[dict[str, Any], TableMeta]:
    # share ids are URL-safe base64 (secrets.token_urlsafe): anything else is no page, and
    # never reaches the database (a NUL in it was a 400 INVALID_VALUE)
    if len(share_id) > 64 or not _SHARE_ID.fullmatch(share_id):
        raise NotFound("no published page here")
    async with state.db.connection() as conn:
        cur = await conn.execute(
            "SELECT v.id, v.workspace_id, v.table_id, v.name, v.view_type, v.config, v.published,"
            " w.plan, w.read_only FROM wds.views v JOIN wds.workspaces w ON w.id = v.workspace_id"
            " WHERE v.share_id = %s AND v.published IS NOT NULL",
            (share_id,),
        )
        view = await cur.fetchone()
    if view is None:
        raise NotFound("no published page here")
    table = (await state.schema(view["workspace_id"])).tables.get(view["table_id"])
    if table is None:
        raise NotFound("no published page here")
    return views.decoded(view, table), table


def visible_columns(view: dict[str, Any], table: TableMeta) -> list[ColumnMeta]:
    """The columns a published view shows, in display order."""
    config = view.get("config") or {}
    names = config.get("fields") if view["view_type"] == "form" else config.get("column_order")
    hidden = set(config.get("hidden_columns") or ())
    cols = [table.column(n) for n in names] if names else sorted(table.columns, key=lambda c: c.position)
    return [c for c in cols if c is not None and c.name not in hidden]


def _form_out(view: dict[str, Any], table: TableMeta) -> dict[str, Any]:
    config = view.get("config") or {}
    return {
        "title": config.get("title") or view["name"], "description": config.get("description"),
        "submit_label": config.get("submit_label") or "Submit",
        "fields": [{"name": c.name, "type": c.type.value, "required": c.required,
                    "options": [o.as_dict() for o in c.options]} for c in visible_columns(view, table)],
    }


async def published(state: AppState, share_id: str, offset: int = 0) -> dict[str, Any]:
    """A published form (``{form, view}``) or one page of a published view (``{view,
    columns, records, limit, offset, total, next_offset}``, visible columns only)."""
    view, table = await _load(state, share_id)
    if view["published"] == "form":
        return {"form": _form_out(view, table), "view": {"name": view["name"], "view_type": view["view_type"]}}
    columns = visible_columns(view, table)
    query = apply_view(RecordQuery(limit=PAGE_SIZE, offset=offset), view=view, table=table)
    # every planned field is read here; only visible ones leave
    plan = plan_query(query, table, can_read=lambda t: t == table.id, get_table=lambda _t: None)
    async with state.db.connection() as conn:
        records, total = await list_records(conn, plan, count=True)
    names = [c.name for c in columns]
    rows = [{"id": r["id"], "fields": {n: r["fields"].get(n) for n in names}} for r in records]
    total = total or 0
    nxt = offset + len(rows) if offset + len(rows) < total else None
    return {"view": {"name": view["name"], "view_type": view["view_type"]},
            "columns": [{"name": c.name, "type": c.type.value} for c in columns],
            "records": rows, "limit": PAGE_SIZE, "offset": offset, "total": total, "next_offset": nxt}


async def published_form(state: AppState, share_id: str) -> PublishedForm:
    """The published form behind ``share_id`` (not found when it is a view)."""
    view, table = await _load(state, share_id)
    if view["published"] != "form":
        raise NotFound("this published page is not a form")
    return PublishedForm(share_id=share_id, view=view, table=table, form=_form_out(view, table))


def _throttle(share_id: str, client: str) -> None:
    now = time.monotonic()
    window = _recent[(share_id, client)]
    while window and window[0] <= now - 60:
        window.popleft()
    if len(window) >= SUBMISSIONS_PER_MINUTE:
        raise RateLimited("too many submissions to this form; try again in a minute",
                          headers={"Retry-After": str(int(60 - (now - window[0])) + 1)})
    window.append(now)
    if len(_recent) > 100_000:  # bound memory under address churn
        _recent.clear()


def admit_submission(form: PublishedForm, client: str) -> None:
    """Refuse a submission before its body is read: read-only plans, and more than
    ``SUBMISSIONS_PER_MINUTE`` from one client address to one share."""
    if form.view["read_only"]:
        raise Forbidden("this workspace's plan allows reads only", code="PLAN_READ_ONLY")
    _throttle(form.share_id, client)


async def submit_form(state: AppState, form: PublishedForm, fields: dict[str, Any]) -> dict[str, Any]:
    """Create one record from the form's fields and run its pipeline; ``{id, submitted}``."""
    allowed = {f["name"] for f in form.form["fields"]}
    extra = sorted(set(fields) - allowed)
    if extra:
        raise UnknownColumn(f"not a field of this form: {', '.join(extra)}")
    table = form.table
    # an anonymous visitor may create records in this one table, nothing else: the create
    # operation then writes the record and its pipeline's outbox row together, as REST does
    submitter = Principal(token_id=0, workspace_id=form.view["workspace_id"], type=TokenType.USER_MCP,
                          profile_id=None, plan=form.view["plan"], read_only=False, expires_at=None,
                          grants={table.id: Perms(read=True, create=True)})
    try:
        created = await record_ops.create_record(state, submitter, table.id, fields)
    except ServiceError as exc:
        if exc.code == "REQUIRED_FIELD" and not any(f"column {name!r}" in exc.message for name in allowed):
            # a required column the form does not show: the visitor cannot fix it, and its
            # name is not theirs to see
            raise ServiceError("this form cannot be submitted: the table requires a field the form does not"
                               " show; tell the form's owner", code="REQUIRED_FIELD") from None
        raise
    return {"id": created["id"], "submitted": True}
