"""Published views and forms: ``{base_url}/p/<share_id>``, readable without a token —
the HTTP door over :mod:`api.ops.publish` (request parsing, JSON or HTML rendering).

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

from typing import Any

from fastapi import APIRouter, Query, Request
from jinja2 import DictLoader, Environment, select_autoescape
from starlette.responses import HTMLResponse, Response

from api.deps import StateDep
from api.ops import publish as ops
from api.ops.publish import share_url  # noqa: F401  (view_tools imports it here until repointed)
from api.responses import JSON
from api.schemas import ErrorOut
from storage.errors import ServiceError

router = APIRouter(prefix="/p", tags=["publish"],
                   responses={s: {"model": ErrorOut, "content": {"text/html": {}}} for s in (400, 403, 404, 429, 503)})
HTML_TOO: dict[int | str, dict[str, Any]] = {200: {"content": {"text/html": {}}}, 201: {"content": {"text/html": {}}}}

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


def _wants_html(request: Request, fmt: str | None) -> bool:
    if fmt is not None:
        return fmt == "html"
    accept = request.headers.get("accept", "")
    return "text/html" in accept and "application/json" not in accept.split(",")[0]


@router.get("/{share_id}", responses=HTML_TOO)
async def published(share_id: str, request: Request, state: StateDep, offset: int = Query(0, ge=0),
                    format: str | None = Query(None, pattern="^(json|html)$")) -> Response:
    """A published view (one page of records, visible columns only) or a published form."""
    page = await ops.published(state, share_id, offset)
    if not _wants_html(request, format):
        return JSON(page)
    if "form" in page:
        form = page["form"]
        return HTMLResponse(_env.get_template("form").render(form=form, title=form["title"]))
    return HTMLResponse(_env.get_template("view").render(
        title=page["view"]["name"], columns=page["columns"], records=page["records"], total=page["total"],
        offset=offset, next_offset=page["next_offset"]))


async def _submitted_fields(request: Request, form: dict[str, Any]) -> dict[str, Any]:
    kinds = {f["name"]: f["type"] for f in form["fields"]}
    if request.headers.get("content-type", "").startswith("application/json"):
        try:
            body = await request.json()
        except ValueError:
            raise ServiceError("the request body is not valid JSON") from None
        sent = body.get("fields") if isinstance(body, dict) else None
        if not isinstance(sent, dict) or set(body) != {"fields"}:
            raise ServiceError("send {\"fields\": {...}} keyed by the form's field names, and nothing else")
        return sent
    data = await request.form()
    # a name the form does not have is refused, as in JSON (ops.submit_form), not dropped
    fields: dict[str, Any] = {name: data.get(name) for name in data.keys() if name not in kinds}
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
    published = await ops.published_form(state, share_id)
    form = published.form
    html = format == "html"
    try:
        ops.admit_submission(published, request.client.host if request.client else "?")
        out = await ops.submit_form(state, published, await _submitted_fields(request, form))
    except ServiceError as exc:
        if not html:
            raise
        page = _env.get_template("form").render(form=form, title=form["title"], error=exc.message)
        return HTMLResponse(page, status_code=exc.status)
    if html:
        return HTMLResponse(_env.get_template("form").render(form=form, title=form["title"], done=True),
                            status_code=201)
    return JSON(out, status_code=201)
