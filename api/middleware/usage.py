"""The API middleware: limits on the REST/SQL door and the usage log of every door.

A pure ASGI middleware (no per-request task or body buffering, unlike Starlette's
``BaseHTTPMiddleware``) that, for calls to an API door:

* on ``/functions/v1/rest-api`` (doors ``rest`` and ``sql``) resolves the bearer token
  (:func:`api.deps.resolve_principal`, or an app-user session through
  :func:`api.services.appusers.app_user_principal`; both cached) and applies :func:`api.services.limits.enforce_limits`
  before routing; a refusal (429/402) is answered here. A token that does not resolve is
  left to the route, which answers 401;
* adds the ``X-RateLimit-*`` headers stashed by ``enforce_limits`` (any door) to the
  response;
* logs the call — workspace, token, door, method, route template (never the raw path, so
  ids do not leak and the cardinality stays bounded), status and duration — into the
  in-memory usage queue (:class:`storage.usage.UsageBuffer`), written once a second.
  App-user sessions are logged under ``token_id = -<user id>`` (they have no token row).

The MCP (``/functions/v1/mcp-server``) and chat (``/functions/v1/agent-webhook``) doors
resolve their principals inside their handlers and call ``enforce_limits(...,
scope=request.scope)``; this middleware then logs them under that principal.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from starlette.routing import compile_path
from starlette.types import Message, Receive, Scope, Send

from api.deps import resolve_principal
from api.errors import error_response
from api.middleware.asgi import ObservingMiddleware
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


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, secret = value.decode("latin-1").partition(" ")
            secret = secret.strip()
            return secret if scheme.lower() == "bearer" and secret else None
    return None


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


_NAMES: dict[str, bytes] = {}


def _header_name(name: str) -> bytes:
    """A header name as ASGI sends it (lower case, bytes); the few names are encoded once."""
    raw = _NAMES.get(name)
    if raw is None:
        raw = _NAMES[name] = name.lower().encode()
    return raw


class ApiMiddleware(ObservingMiddleware):
    """See the module docstring. Install with ``app.add_middleware(ApiMiddleware)``."""

    def observes(self, scope: Scope) -> bool:
        return door_of(scope["path"]) is not None

    def starting(self, scope: Scope, message: Message) -> None:
        extra = scope.setdefault("state", {}).get(limits.HEADERS_KEY)
        if extra:
            message["headers"] = [*message.get("headers", ()),
                                  *((_header_name(k), v.encode()) for k, v in extra.items())]

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        door = door_of(scope["path"])
        st: dict[str, Any] = scope.setdefault("state", {})
        if door in ENFORCED_HERE and not st.get(limits.DONE_KEY):
            state = scope["app"].state.wds
            secret = _bearer(scope)
            principal = None
            if secret:
                try:
                    if appusers.is_app_token(secret):  # an app-user session (JWT)
                        principal = await appusers.app_user_principal(state, secret)
                    else:
                        principal = await resolve_principal(state, secret)
                        st[RESOLVED_KEY] = (secret, principal)  # the fast paths need not resolve it again
                except ServiceError:
                    principal = None  # the route answers 401 / 503 itself
            if principal is not None:
                try:
                    await limits.enforce_limits(state, principal, door, scope=scope)
                except ServiceError as exc:
                    response = error_response(exc.status, exc.message, exc.code, exc.headers or None,
                                              **exc.extra)
                    await response(scope, receive, send)
                    return
        principal = st.get(limits.PRINCIPAL_KEY)
        if principal is None or door not in GATED:
            await self.app(scope, receive, send)
            return
        try:
            release = await limits.runtime(scope["app"].state.wds).gate.acquire(principal.workspace_id)
        except ServiceError as exc:
            await error_response(exc.status, exc.message, exc.code, exc.headers or None)(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            release()

    def observe(self, scope: Scope, status: int, seconds: float) -> None:
        st = scope.setdefault("state", {})
        principal = st.get(limits.PRINCIPAL_KEY)
        limits.runtime(scope["app"].state.wds).usage.record(
            workspace_id=getattr(principal, "workspace_id", None),
            token_id=getattr(principal, "token_id", None),
            door=st.get("wds_door") or door_of(scope["path"]),
            method=scope["method"],
            route=route_template(scope),
            status=status,
            duration_ms=seconds * 1000.0,
        )
