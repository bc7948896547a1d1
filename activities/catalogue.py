"""The special-fields catalogue: integration groups and their templated HTTP requests.

The catalogue is data (``catalogue.json`` beside this module), validated when first
loaded: every request has an http(s) method and URL template, declared parameters
``{name, type, required, default?, description}`` and the credential it needs
(``{types, required, header_name?}`` or ``null``). Templates are sandboxed Jinja2 over
``params``. Adding an integration is an edit of the JSON file, not of code.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import Any

import orjson

from activities.proxy import METHODS
from activities.templates import TemplateFailure, check_template
from storage.secrets import CREDENTIAL_TYPES

PATH = Path(__file__).with_name("catalogue.json")
PARAM_TYPES = ("string", "url", "number", "integer", "boolean", "json")


class CatalogueError(Exception):
    """The catalogue file is malformed (a deployment error, caught by the tests)."""


def _check_request(group_id: str, req: dict[str, Any]) -> None:
    where = f"{group_id}/{req.get('id')}"
    for key in ("id", "name", "description", "method", "url"):
        if not isinstance(req.get(key), str) or not req[key]:
            raise CatalogueError(f"{where}: {key} must be a non-empty string")
    if req["method"] not in METHODS:
        raise CatalogueError(f"{where}: unknown method {req['method']!r}")
    names = set()
    for p in req.get("params", []):
        if not isinstance(p.get("name"), str) or p["name"] in names:
            raise CatalogueError(f"{where}: parameter names must be unique strings")
        names.add(p["name"])
        if p.get("type") not in PARAM_TYPES:
            raise CatalogueError(f"{where}: parameter {p['name']!r} has unknown type {p.get('type')!r}")
        if not isinstance(p.get("required"), bool) or not isinstance(p.get("description"), str):
            raise CatalogueError(f"{where}: parameter {p['name']!r} needs required (bool) and description")
    cred = req.get("credential")
    if cred is not None:
        types = cred.get("types")
        if not isinstance(types, list) or not types or any(t not in CREDENTIAL_TYPES for t in types):
            raise CatalogueError(f"{where}: unknown credential kind in {types!r}")
        if not isinstance(cred.get("required"), bool):
            raise CatalogueError(f"{where}: credential.required must be a boolean")
    templates = [req["url"], req.get("body") or "", *(req.get("headers") or {}).values()]
    try:
        for text in templates:
            check_template(text)
    except TemplateFailure as exc:
        raise CatalogueError(f"{where}: {exc}") from None


@lru_cache(maxsize=1)
def _load() -> dict[str, dict[str, Any]]:
    data = orjson.loads(PATH.read_bytes())
    groups: dict[str, dict[str, Any]] = {}
    for group in data["groups"]:
        gid = group.get("id")
        if not isinstance(gid, str) or gid in groups:
            raise CatalogueError(f"group ids must be unique strings ({gid!r})")
        seen = set()
        for req in group.get("requests", []):
            _check_request(gid, req)
            if req["id"] in seen:
                raise CatalogueError(f"{gid}: duplicate request id {req['id']!r}")
            seen.add(req["id"])
        groups[gid] = group
    return groups


def list_groups() -> list[dict[str, Any]]:
    """Every integration group: ``{id, name, description, request_count}``."""
    return [
        {"id": g["id"], "name": g["name"], "description": g["description"], "request_count": len(g["requests"])}
        for g in _load().values()
    ]


def list_requests(group_id: str) -> list[dict[str, Any]] | None:
    """The requests of a group (a copy, safe to serialise), or None for an unknown group."""
    group = _load().get(group_id)
    if group is None:
        return None
    return [{"group_id": group_id, **copy.deepcopy(r)} for r in group["requests"]]


def find_request(group_id: str, request_id: str) -> dict[str, Any] | None:
    """One request definition (not a copy: do not mutate), or None."""
    group = _load().get(group_id)
    if group is None:
        return None
    return next((r for r in group["requests"] if r["id"] == request_id), None)


def integrations() -> list[dict[str, Any]]:
    """Flat list for the MCP ``check_column_types`` tool: one entry per request, with the
    config an ``action`` column needs (``{group_id, request_id, params}``)."""
    out = []
    for g in _load().values():
        for r in g["requests"]:
            out.append({
                "group_id": g["id"], "group": g["name"], "request_id": r["id"], "name": r["name"],
                "description": r["description"],
                "params": [{k: p[k] for k in ("name", "type", "required", "description", "default") if k in p}
                           for p in r.get("params", [])],
                "credential": copy.deepcopy(r.get("credential")),
            })
    return out


def param_defaults(group_id: str, request_id: str) -> dict[str, Any]:
    """The declared defaults of a request's parameters (empty for an unknown request)."""
    req = find_request(group_id, request_id)
    if req is None:
        return {}
    return {p["name"]: p["default"] for p in req.get("params", []) if p.get("default") is not None}
