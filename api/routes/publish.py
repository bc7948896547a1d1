"""Published views and forms: ``{base_url}/p/<share_id>``, readable without a token.

A published *view* shows one page of its records with only the view's visible columns
(``column_order`` minus ``hidden_columns``; every column when neither is set), filtered
and sorted as the view says. A published *form* describes its fields and accepts
submissions (``POST``, JSON ``{fields}`` or an HTML form post) that create a record
through the normal write path: only the form's fields, required columns enforced,
computed columns run. The answer is JSON, or an HTML page (Jinja2, autoescaped) when the
client prefers ``text/html`` or asks ``?format=html``.

Submissions are limited per share and client address (a moving one-minute window per
API process) and refused on read-only plans; the pipeline runs with create rights on
the form's table only.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from typing import Any

from fastapi import APIRouter, Query, Request
from jinja2 import DictLoader, Environment, select_autoescape
from starlette.responses import HTMLResponse, Response

from api.deps import StateDep
from api.pipelines import run_after_write
from api.responses import JSON
from api.schemas import ErrorOut
from api.state import AppState
from storage import records as rec
from storage import views
from storage.access import Perms, Principal, TokenType
from storage.errors import Forbidden, NotFound, RateLimited, ServiceError, UnknownColumn
from storage.query import Query as RecordQuery
from storage.query import list_records, plan_query
from storage.schema import ColumnMeta, TableMeta
from storage.views import apply_view
from wds.config import Settings

router = APIRouter(prefix="/p", tags=["publish"],
                   responses={s: {"model": ErrorOut, "content": {"text/html": {}}} for s in (400, 403, 404, 429, 503)})
HTML_TOO: dict[int | str, dict[str, Any]] = {200: {"content": {"text/html": {}}}, 201: {"content": {"text/html": {}}}}
PAGE_SIZE = 100
SUBMISSIONS_PER_MINUTE = 30
_recent: dict[tuple[str, str], deque[float]] = defaultdict(deque)

_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>{{ title }}</title>
<style>body{font:15px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:60rem;padding:0 1rem;color:#222}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #ddd;padding:.4rem .6rem;text-align:left}
th{background:#f6f6f6}label{display:block;margin:.8rem 0 .2rem;font-weight:600}
input,select,textarea{width:100%;padding:.4rem;box-sizing:border-box}button{margin-top:1rem;padding:.5rem 1.2rem}
.muted{color:#777}</style></head><body>{% block body %}{% endblock %}</body></html>"""
_VIEW = """{% extends "page" %}{% block body %}<h1>{{ title }}</h1>
<p class="muted">{{ total }} record(s){% if total > records|length %}, showing {{ offset + 1 }}–{{ offset + records|length }}{% endif %}</p>
<table><thead><tr>{% for c in columns %}<th>{{ c.name }}</th>{% endfor %}</tr></thead><tbody>
{% for r in records %}<tr>{% for c in columns %}<td>{{ r.fields[c.name] | show }}</td>{% endfor %}</tr>{% endfor %}
</tbody></table>{% if next_offset is not none %}<p><a href="?format=html&offset={{ next_offset }}">Next page</a></p>{% endif %}
{% endblock %}"""
_FORM = """{% extends "page" %}{% block body %}<h1>{{ form.title }}</h1>
{% if form.description %}<p>{{ form.description }}</p>{% endif %}
{% if done %}<p><strong>Thank you — your submission was received.</strong></p>{% endif %}
{% if error %}<p style="color:#b00"><strong>{{ error }}</strong></p>{% endif %}
<form method="post" action="?format=html">{% for f in form.fields %}
<label for="f{{ loop.index }}">{{ f.name }}{% if f.required %} *{% endif %}</label>
{% if f.type == "single_select" %}<select id="f{{ loop.index }}" name="{{ f.name }}"><option value=""></option>
{% for o in f.options %}<option value="{{ o.id }}">{{ o.label }}</option>{% endfor %}</select>
{% elif f.type == "checkbox" %}<input id="f{{ loop.index }}" type="checkbox" name="{{ f.name }}" value="true" style="width:auto">
{% elif f.type == "number" %}<input id="f{{ loop.index }}" type="number" step="any" name="{{ f.name }}">
{% elif f.type == "date" %}<input id="f{{ loop.index }}" type="date" name="{{ f.name }}">
{% else %}<input id="f{{ loop.index }}" type="text" name="{{ f.name }}">{% endif %}
{% endfor %}<button type="submit">{{ form.submit_label }}</button></form>{% endblock %}"""


def _show(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ", ".join(_show(v) for v in value)
    if isinstance(value, dict):
        return str(value.get("id", value))
    return str(value)


_env = Environment(loader=DictLoader({"page": _PAGE, "view": _VIEW, "form": _FORM}),
                   autoescape=select_autoescape(default=True, default_for_string=True))
_env.filters["show"] = _show


def share_url(settings: Settings, share_id: str) -> str:
    return f"{settings.public_base_url.rstrip('/')}/p/{share_id}"


async def _load(state: AppState, share_id: str) -> tuple[dict[str, Any], TableMeta]:
    if len(share_id) > 64:
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


def _wants_html(request: Request, fmt: str | None) -> bool:
    if fmt is not None:
        return fmt == "html"
    accept = request.headers.get("accept", "")
    return "text/html" in accept and "application/json" not in accept.split(",")[0]


def _form_out(view: dict[str, Any], table: TableMeta) -> dict[str, Any]:
    config = view.get("config") or {}
    return {
        "title": config.get("title") or view["name"], "description": config.get("description"),
        "submit_label": config.get("submit_label") or "Submit",
        "fields": [{"name": c.name, "type": c.type.value, "required": c.required,
                    "options": [o.as_dict() for o in c.options]} for c in visible_columns(view, table)],
    }


@router.get("/{share_id}", responses=HTML_TOO)
async def published(share_id: str, request: Request, state: StateDep, offset: int = Query(0, ge=0),
                    format: str | None = Query(None, pattern="^(json|html)$")) -> Response:
    """A published view (one page of records, visible columns only) or a published form."""
    view, table = await _load(state, share_id)
    html = _wants_html(request, format)
    if view["published"] == "form":
        form = _form_out(view, table)
        if html:
            return HTMLResponse(_env.get_template("form").render(form=form, title=form["title"]))
        return JSON({"form": form, "view": {"name": view["name"], "view_type": view["view_type"]}})
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
    if html:
        return HTMLResponse(_env.get_template("view").render(
            title=view["name"], columns=columns, records=rows, total=total, offset=offset, next_offset=nxt))
    return JSON({"view": {"name": view["name"], "view_type": view["view_type"]},
                 "columns": [{"name": c.name, "type": c.type.value} for c in columns],
                 "records": rows, "limit": PAGE_SIZE, "offset": offset, "total": total, "next_offset": nxt})


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


async def _submitted_fields(request: Request, form: dict[str, Any]) -> dict[str, Any]:
    kinds = {f["name"]: f["type"] for f in form["fields"]}
    if request.headers.get("content-type", "").startswith("application/json"):
        try:
            body = await request.json()
        except ValueError:
            raise ServiceError("the request body is not valid JSON") from None
        sent = body.get("fields") if isinstance(body, dict) else None
        if not isinstance(sent, dict):
            raise ServiceError("send {\"fields\": {...}} keyed by the form's field names")
        return sent
    data = await request.form()
    fields: dict[str, Any] = {}
    for name, kind in kinds.items():
        raw = data.get(name)
        if kind == "checkbox":
            fields[name] = raw is not None
        elif isinstance(raw, str) and raw != "":
            fields[name] = float(raw) if kind == "number" and _is_number(raw) else raw
    return fields


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@router.post("/{share_id}", status_code=201, responses=HTML_TOO)
async def submit(share_id: str, request: Request, state: StateDep,
                 format: str | None = Query(None, pattern="^(json|html)$")) -> Response:
    """Submit a published form: creates one record (form fields only) and runs its pipeline."""
    view, table = await _load(state, share_id)
    if view["published"] != "form":
        raise NotFound("this published page is not a form")
    form = _form_out(view, table)
    html = format == "html"
    try:
        if view["read_only"]:
            raise Forbidden("this workspace's plan allows reads only", code="PLAN_READ_ONLY")
        _throttle(share_id, request.client.host if request.client else "?")
        fields = await _submitted_fields(request, form)
        allowed = {f["name"] for f in form["fields"]}
        extra = sorted(set(fields) - allowed)
        if extra:
            raise UnknownColumn(f"not a field of this form: {', '.join(extra)}")
        prepared = rec.prepare_fields(table, fields, creating=True)
        async with state.db.connection() as conn:
            row = await rec.insert_record(conn, table=table, row=prepared)
        submitter = Principal(token_id=0, workspace_id=view["workspace_id"], type=TokenType.USER_MCP,
                              profile_id=None, plan=view["plan"], read_only=False, expires_at=None,
                              grants={table.id: Perms(read=True, create=True)})
        await run_after_write(state, submitter, table, [row], mode="create", changed=None)
    except ServiceError as exc:
        if not html:
            raise
        page = _env.get_template("form").render(form=form, title=form["title"], error=exc.message)
        return HTMLResponse(page, status_code=exc.status)
    if html:
        return HTMLResponse(_env.get_template("form").render(form=form, title=form["title"], done=True),
                            status_code=201)
    return JSON({"id": row["id"], "submitted": True}, status_code=201)
