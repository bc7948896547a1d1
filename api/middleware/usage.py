"""Limits on the REST/SQL door and the usage log of every door.

Steps of the API's front layer (:mod:`api.middleware.front`) that, for calls to an API
door:

* on ``/functions/v1/rest-api`` (doors ``rest`` and ``sql``) and bearer-token storage
  calls resolve the bearer token (:func:`api.deps.resolve_principal`, or an app-user
  session through :func:`api.services.appusers.app_user_principal`; both cached) and
  apply :func:`api.services.limits.enforce_limits` before routing (:func:`admit`); a
  refusal (429/402) is answered there. A token that does not resolve is left to the
  route, which answers 401. REST and SQL calls then take a slot of their workspace's
  share of the process (:func:`take_slot`);
* add the ``X-RateLimit-*`` headers stashed by ``enforce_limits`` (any door) to the
  response (:func:`add_limit_headers`);
* log the call (:func:`record`) — workspace, token, door, method, route template (never
  the raw path, so ids do not leak and the cardinality stays bounded), status and
  duration — into the in-memory usage queue (:class:`storage.usage.UsageBuffer`), written once a second.
  App-user sessions are logged under ``token_id = -<user id>`` (they have no token row).

The MCP (``/functions/v1/mcp-server``) and chat (``/functions/v1/agent-webhook``) doors
resolve their principals inside their handlers and call ``enforce_limits(...,
scope=request.scope)``; the front layer then logs them under that principal.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from starlette.responses import Response
from starlette.routing import compile_path
from starlette.types import Message, Scope

from api.deps import resolve_principal
from api.errors import error_response
from api.services import appusers, limits
from storage.errors import ServiceError

REST_PREFIX = "/functions/v1/rest-api"
# path prefix → door; the first match wins
DOORS: tuple[tuple[str, str], ...] = (
    (REST_PREFIX + "/sql", "sql"),
    (REST_PREFIX, "rest"),
    ("/functions/v1/mcp-server", "mcp"),
    ("/functions/v1/agent-webhook", "chat"),
    ("/storage/v1", "storage"),
)
ENFORCED_HERE = frozenset({"rest", "sql", "storage"})  # bearer-token doors routed here
# doors whose requests take a slot of their workspace's share of the process (limits.WorkspaceGate);
# storage is I/O, not event-loop work, and a slow upload must not hold a slot
GATED = frozenset({"rest", "sql"})
RESOLVED_KEY = "wds_resolved"  # scope state: (bearer secret, its principal) as resolved here


def door_of(path: str) -> str | None:
    """The door a path belongs to (``None``: not an API door, e.g. admin or health).

    >>> door_of("/functions/v1/rest-api/sql"), door_of("/functions/v1/rest-api/tables/1"), door_of("/healthz")
    ('sql', 'rest', None)
    """
    for prefix, door in DOORS:
        if path.startswith(prefix) and (len(path) == len(prefix) or path[len(prefix)] in "/?"):
            return door
    return None


def bearer(value: bytes | None) -> str | None:
    """The secret of an ``Authorization: Bearer <secret>`` header value (``None``: none)."""
    if value is None:
        return None
    scheme, _, secret = value.decode("latin-1").partition(" ")
    secret = secret.strip()
    return secret if scheme.lower() == "bearer" and secret else None


def _flatten(routes: Any, prefix: str = "") -> Iterator[str]:
    """Full path templates of an app's routes, through included routers (any FastAPI
    version: older ones flatten routes themselves, newer ones keep include contexts)."""
    for route in routes:
        included = getattr(route, "original_router", None)
        context = getattr(route, "include_context", None)
        if included is not None and context is not None:
            yield from _flatten(included.routes, prefix + (getattr(context, "prefix", "") or ""))
        elif getattr(route, "path", None):
            yield prefix + route.path


_TEMPLATES: dict[int, list[tuple[re.Pattern[str], str]]] = {}


def route_template(scope: Scope) -> str:
    """The matched route's path template. When routing did not run (a refused request) the
    path is matched against the app's templates. Unknown paths log as ``<unmatched>``."""
    route = scope.get("route")
    if route is not None and getattr(route, "path", None):
        return str(route.path)
    app = scope.get("app")
    table = _TEMPLATES.get(id(app))
    if table is None:
        table = _TEMPLATES[id(app)] = [(compile_path(t)[0], t) for t in _flatten(getattr(app, "routes", ()))]
    path = scope["path"]
    for regex, template in table:
        if regex.match(path):
            return template
    return "<unmatched>"


def add_limit_headers(st: dict[str, Any], message: Message) -> None:
    """Append the ``X-RateLimit-*`` headers of the values ``enforce_limits`` stashed (if
    any) to a response's ``http.response.start`` message."""
    window = st.get(limits.HEADERS_KEY)
    if window is not None:
        message["headers"] = [*message.get("headers", ()), *limits.header_pairs(window)]


async def admit(scope: Scope, st: dict[str, Any], door: str, authorization: bytes | None) -> Response | None:
    """Resolve the caller of a REST/SQL/storage call and apply the limits; the refusal
    (429/402) to answer, or ``None`` to go on. A token that does not resolve is left to
    the route (401)."""
    if door not in ENFORCED_HERE or st.get(limits.DONE_KEY):
        return None
    secret = bearer(authorization)
    if not secret:
        return None
    state = scope["app"].state.wds
    try:
        if appusers.is_app_token(secret):  # an app-user session (JWT)
            principal = await appusers.app_user_principal(state, secret)
        else:
            principal = await resolve_principal(state, secret)
            st[RESOLVED_KEY] = (secret, principal)  # the fast paths need not resolve it again
    except ServiceError:
        return None  # the route answers 401 / 503 itself
    try:
        await limits.enforce_limits(state, principal, door, scope=scope)
    except ServiceError as exc:
        return error_response(exc.status, exc.message, exc.code, exc.headers or None, **exc.extra)
    return None


async def take_slot(scope: Scope, st: dict[str, Any], door: str) -> Callable[[], None]:
    """A slot of the caller's workspace share of the process (REST and SQL calls of a
    resolved principal); call what is returned to give it back.

    Raises:
        Unavailable: 503 ``WORKSPACE_BUSY`` (:meth:`api.services.limits.WorkspaceGate.acquire`).
    """
    principal = st.get(limits.PRINCIPAL_KEY)
    if principal is None or door not in GATED:
        return _nothing
    return await limits.runtime(scope["app"].state.wds).gate.acquire(principal.workspace_id)


def _nothing() -> None:
    pass


def record(scope: Scope, st: dict[str, Any], door: str, route: str, status: int, seconds: float) -> None:
    """Log a finished call of an API door (``door``, unless a handler named another) into
    the usage queue."""
    principal = st.get(limits.PRINCIPAL_KEY)
    limits.runtime(scope["app"].state.wds).usage.record(
        workspace_id=getattr(principal, "workspace_id", None),
        token_id=getattr(principal, "token_id", None),
        door=st.get("wds_door") or door,
        method=scope["method"],
        route=route,
        status=status,
        duration_ms=seconds * 1000.0,
    )
