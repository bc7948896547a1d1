"""A direct ASGI dispatch for the hottest calls: one record by id, a records list, SQL,
and the create of one record.

``GET {rest}/tables/{id}/records/{record_id}``, ``GET {rest}/tables/{id}/records`` and
``POST {rest}/sql`` are most of a typical backend's read traffic. FastAPI's router walks
every route and its dependency solver builds a ``Request``, resolves the dependencies and
validates the body for each call; on these reads that machinery cost more CPU than the
database query itself (measured in ``bench/``: GET by id and filtered list at 16 clients,
the SQL endpoint beside psycopg). This ASGI app, called last by the front layer
(:mod:`api.middleware.front`: metrics, body limit, CORS, limits, text guard and
idempotency come first) and wrapping FastAPI's router, recognises the three paths and
answers them with the *same* functions the FastAPI routes call
(:func:`api.doors.rest_reads.record_response`, :func:`~api.doors.rest_reads.list_response` and
:func:`api.ops.sql.execute_sql`), the same principal resolution
(:func:`api.deps.resolve_principal`) and the same error rendering
(:func:`api.errors.service_error_response`). It marks the request with the FastAPI route
(found in the application's router by its path and method), so usage logs and metrics
see the route template as before.

``POST {rest}/tables/{id}/records`` (one record) is answered with
:func:`api.ops.records.create_record`, as the create route is: FastAPI's routing,
dependency solving and body model cost that write more CPU than its INSERT (profiled with
py-spy, bench/RESULTS-hotpath.md). ``POST {rest}/tables/{id}/records/batch`` is answered
with :func:`api.doors.rest_reads.batch_response`, the batch route's own body: routing,
dependency solving, the standard library's JSON parse and the body model were ~30 % of a
100-row batch's API CPU (py-spy).

Anything it is not sure to answer identically goes on to FastAPI unchanged: other
methods and paths, app-user (JWT) sessions, requests without a usable bearer token,
SQL bodies that are not a JSON object of exactly a string
``query`` and an optional boolean ``count`` sent as ``application/json``, and create
bodies that are not exactly ``{"fields": {...}}`` as ``application/json`` or whose query
string is anything but empty or ``run_pipeline=true|false``, batch bodies that are not
exactly ``{"rows": [{...}, ...], "run_pipeline"?: bool}`` with no query string (FastAPI
then reads the same body bytes), and any body holding a run of 19 or more digits: orjson
reads an integer beyond 64 bits as a float, where FastAPI's parser keeps its digits (a
text column stores ``"123456789012345678901234567890"``, not ``"1.2345678901234568e+29"``). ``tests/api/test_fastpath.py`` checks that both paths give byte-identical
answers (a created record's id and timestamps aside).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import unquote

import orjson
import psycopg
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from api.deps import resolve_principal
from api.doors.rest_reads import batch_response, list_response, record_response
from api.errors import database_error_on, service_error_response
from api.middleware.bodies import read_body, replay
from api.middleware.front import HEADERS_KEY
from api.middleware.usage import RESOLVED_KEY, bearer  # None leaves the 401 to FastAPI
from api.ops import records as record_ops
from api.ops.sql import execute_sql
from api.responses import JSON
from api.services import appusers
from storage.access import Principal, TokenType
from storage.errors import Forbidden, ServiceError

_A = TypeVar("_A")  # a POST's parsed arguments (FastReads._arguments)
_PREFIX = "/functions/v1/rest-api/tables/"
_SQL = "/functions/v1/rest-api/sql"
_SQL_KEYS = frozenset({"query", "count"})
_SQL_BODY_MAX = 64 * 1024  # larger bodies go to FastAPI (a query is at most 10,000 characters)
_CREATE_BODY_MAX = 256 * 1024  # a larger record body goes to FastAPI (it reads it all anyway)
_BATCH_BODY_MAX = 4 * 1024 * 1024  # likewise a larger batch body (500 rows of ~8 KB)
_BATCH_KEYS = frozenset({"rows", "run_pipeline"})
# a run of digits orjson may read as a float where the standard library keeps an int:
# an integer outside [-2^63, 2^64) has 19 digits or more. Found by mapping every digit to
# "0" and everything else to " " (~5 µs for a 6 KB body, a regex took ~60 µs)
_DIGITS = bytes(0x30 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))
_LONG_DIGITS = b"0" * 19
_HEADERS = (b"authorization", b"prefer", b"content-type")
_RECORD = re.compile(r"/functions/v1/rest-api/tables/(\d{1,18})/records/([^/]+)")
_LIST = re.compile(r"/functions/v1/rest-api/tables/(\d{1,18})/records")
_BATCH = re.compile(r"/functions/v1/rest-api/tables/(\d{1,18})/records/batch")
# the FastAPI routes these paths stand for (their templates, as the router names them)
_GET_ROUTE = ("GET", "/functions/v1/rest-api/tables/{table_id}/records/{record_id}")
_LIST_ROUTE = ("GET", "/functions/v1/rest-api/tables/{table_id}/records")
_SQL_ROUTE = ("POST", _SQL)
_CREATE_ROUTE = ("POST", "/functions/v1/rest-api/tables/{table_id}/records")
_BATCH_ROUTE = ("POST", "/functions/v1/rest-api/tables/{table_id}/records/batch")


def _route(app: Any, method: str, path: str) -> Any:
    """The application's route for ``method`` and the path template ``path`` (routers
    included in the application are searched too)."""
    routes = list(app.router.routes)
    while routes:
        route = routes.pop(0)
        included = getattr(route, "original_router", None)
        if included is not None:
            routes.extend(included.routes)
        elif getattr(route, "path", None) == path and method in (getattr(route, "methods", None) or ()):
            return route
    raise LookupError(f"no route {method} {path}")


class FastReads:
    """See the module docstring. ``FastReads(router_app)``: :class:`api.middleware.front.Front`
    makes it from its ``fast`` argument."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.routes: dict[tuple[str, str], Any] = {}

    def route(self, scope: Scope, key: tuple[str, str]) -> Any:
        """The FastAPI route the request stands for (looked up once in the application)."""
        found = self.routes.get(key)
        if found is None:
            found = self.routes[key] = _route(scope["app"], *key)
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            if scope["path"] == _SQL:
                await self._sql(scope, receive, send)
                return
            listing = _LIST.fullmatch(scope["path"])
            if listing is not None:
                await self._create(scope, receive, send, int(listing[1]))
                return
            batch = _BATCH.fullmatch(scope["path"])
            if batch is not None:
                await self._batch(scope, receive, send, int(batch[1]))
                return
        if scope["type"] != "http" or scope["method"] != "GET" or not scope["path"].startswith(_PREFIX):
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        record = _RECORD.fullmatch(path)
        listing = None if record is not None else _LIST.fullmatch(path)
        if record is None and listing is None:
            await self.app(scope, receive, send)
            return
        params = parse_query(scope.get("query_string", b"").decode("latin-1"))
        headers = _headers(scope)
        secret = bearer(headers.get(b"authorization"))
        if secret is None or appusers.is_app_token(secret):
            await self.app(scope, receive, send)  # FastAPI answers 401 / handles app users
            return
        if record is not None:
            tid, ref = int(record[1]), record[2]

            async def answer(state: Any, principal: Principal) -> Response:
                return await record_response(state, principal, tid, ref, params)

            await self._answer(scope, receive, send, secret, _GET_ROUTE, answer, tid)
            return
        table_id = int(listing[1])  # type: ignore[index]
        view = next((v for k, v in reversed(params) if k == "view"), None)
        prefer = headers.get(b"prefer", b"").decode("latin-1")

        async def answer_list(state: Any, principal: Principal) -> Response:
            return await list_response(state, principal, table_id, params, prefer=prefer, view=view)

        await self._answer(scope, receive, send, secret, _LIST_ROUTE, answer_list, table_id)

    async def _answer(self, scope: Scope, receive: Receive, send: Send, secret: str, route: tuple[str, str],
                      answer: Callable[[Any, Principal], Awaitable[Response]], table_id: int | None = None) -> None:
        """Resolve the caller as FastAPI's ``RestPrincipal`` would, mark the request with the
        route it stands for, and send ``answer``'s response, or the error a route would give."""
        st: dict[str, Any] = scope.setdefault("state", {})
        state = scope["app"].state.wds
        try:
            principal = await _principal(state, st, secret)
            if principal.type is TokenType.USER_MCP:
                raise Forbidden("user_mcp tokens work on the MCP server only", code="WRONG_PROTOCOL")
            st["principal"] = principal  # as rest_principal does (request.state.principal)
            scope["route"] = self.route(scope, route)
            response = await answer(state, principal)
        except ServiceError as exc:
            response = service_error_response(exc)
        except psycopg.Error as exc:
            mapped = await database_error_on(state, exc, table_id)
            if mapped is None:
                raise
            response = service_error_response(mapped)
        await response(scope, receive, send)

    async def _arguments(self, scope: Scope, receive: Receive, send: Send, limit: int,
                         parse: Callable[[dict[bytes, bytes], bytes], _A | None]) -> tuple[dict[bytes, bytes], str, _A] | None:
        """Read a POST's body (up to just past ``limit`` bytes) and ``parse`` its arguments:
        ``(headers, bearer secret, arguments)``. ``None`` when there is nothing left to do
        here: the client left, or the request went on to FastAPI (a larger body, no usable
        bearer token, an app user's session, or arguments ``parse`` does not take as they
        are), which reads the same body bytes and answers as it would."""
        read = await read_body(receive, limit=limit)
        if read is None:  # the client left: nothing to answer
            return None
        body, more = read
        headers = _headers(scope)
        secret = bearer(headers.get(b"authorization"))
        if not more and secret is not None and not appusers.is_app_token(secret):
            args = parse(headers, body)
            if args is not None:
                return headers, secret, args
        await self.app(scope, replay(body, more, receive), send)
        return None

    async def _sql(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``POST {rest}/sql`` as the FastAPI route ``api.doors.rest.sql.sql`` answers it."""
        got = await self._arguments(scope, receive, send, _SQL_BODY_MAX, _sql_args)
        if got is None:
            return
        headers, secret, (query, count) = got
        prefer = headers.get(b"prefer", b"").decode("latin-1")

        async def answer(state: Any, principal: Principal) -> Response:
            return JSON(await execute_sql(state, principal, query, json_rows=True,
                                          count=count or "count=exact" in prefer))

        await self._answer(scope, receive, send, secret, _SQL_ROUTE, answer)  # type: ignore[arg-type]

    async def _create(self, scope: Scope, receive: Receive, send: Send, table_id: int) -> None:
        """``POST {rest}/tables/{id}/records`` as the create route answers it, for a body of
        exactly ``{"fields": {...}}`` and no query but ``run_pipeline``."""
        run_pipeline = _run_pipeline(scope.get("query_string", b""))
        got = await self._arguments(scope, receive, send, _CREATE_BODY_MAX,
                                    lambda headers, body: None if run_pipeline is None else _create_fields(headers, body))
        if got is None:
            return
        _, secret, fields = got

        async def answer(state: Any, principal: Principal) -> Response:
            return JSON(await record_ops.create_record(state, principal, table_id, fields,
                                                       run_pipeline=bool(run_pipeline)), status_code=201)

        await self._answer(scope, receive, send, secret, _CREATE_ROUTE, answer, table_id)  # type: ignore[arg-type]

    async def _batch(self, scope: Scope, receive: Receive, send: Send, table_id: int) -> None:
        """``POST {rest}/tables/{id}/records/batch`` as the batch route answers it, for a
        body of exactly ``{"rows": [{...}, ...], "run_pipeline"?: bool}`` and no query."""
        query = scope.get("query_string")
        got = await self._arguments(scope, receive, send, _BATCH_BODY_MAX,
                                    lambda headers, body: None if query else _batch_args(headers, body))
        if got is None:
            return
        _, secret, (rows, run_pipeline) = got

        async def answer(state: Any, principal: Principal) -> Response:
            return await batch_response(state, principal, table_id, rows, run_pipeline=run_pipeline)

        await self._answer(scope, receive, send, secret, _BATCH_ROUTE, answer, table_id)


async def _principal(state: Any, st: dict[str, Any], secret: str) -> Principal:
    """The principal of ``secret``: as the front layer (:func:`api.middleware.usage.admit`)
    resolved it for this request (same header, microseconds ago), else :func:`api.deps.resolve_principal`."""
    resolved = st.get(RESOLVED_KEY)
    if resolved is not None and resolved[0] == secret:
        return resolved[1]  # type: ignore[no-any-return]
    return await resolve_principal(state, secret)


def parse_query(query: str) -> list[tuple[str, str]]:
    """``urllib.parse.parse_qsl(query, keep_blank_values=True)``, with ``unquote`` called
    only on the names and values that hold a ``%`` or a ``+`` (parse_qsl calls it, and
    ``str.replace``, on every one: a quarter of the fast path's own time on a list query).

    >>> parse_query("Score=gt.500&a+b=%C3%A9&flag&&x=")
    [('Score', 'gt.500'), ('a b', 'é'), ('flag', ''), ('x', '')]
    """
    out: list[tuple[str, str]] = []
    if not query:
        return out
    for piece in query.split("&"):
        if not piece:
            continue
        name, _, value = piece.partition("=")
        if "%" in name or "+" in name:
            name = unquote(name.replace("+", " "))
        if "%" in value or "+" in value:
            value = unquote(value.replace("+", " "))
        out.append((name, value))
    return out


def _run_pipeline(query: bytes) -> bool | None:
    """``run_pipeline`` of a create's query string: no query is ``True``; exactly
    ``run_pipeline=true|false`` is that; anything else (``None``) goes to FastAPI."""
    if not query:
        return True
    return {b"run_pipeline=true": True, b"run_pipeline=false": False}.get(query)


def _json_body(headers: dict[bytes, bytes], body: bytes) -> Any:
    """The body parsed as JSON when it is sent as ``application/json`` and parses (orjson is
    stricter than json.loads: what it accepts, both read alike), else ``None``."""
    media = headers.get(b"content-type", b"").partition(b";")[0].strip().lower()
    if media != b"application/json" or _LONG_DIGITS in body.translate(_DIGITS):
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def _create_fields(headers: dict[bytes, bytes], body: bytes) -> dict[str, Any] | None:
    """The ``fields`` of a create body FastAPI would read as :class:`api.schemas.RecordIn`
    with ``fields`` alone set to an object, or ``None`` to leave the request to FastAPI."""
    data = _json_body(headers, body)
    if type(data) is not dict or len(data) != 1 or type(data.get("fields")) is not dict:
        return None
    return data["fields"]  # type: ignore[no-any-return]


def _batch_args(headers: dict[bytes, bytes], body: bytes) -> tuple[list[dict[str, Any]], bool] | None:
    """``(rows, run_pipeline)`` of a body FastAPI would accept as :class:`api.schemas.BatchIn`
    as it is (a list of objects, a boolean), or ``None`` to leave the request to FastAPI."""
    data = _json_body(headers, body)
    if type(data) is not dict or "rows" not in data or not data.keys() <= _BATCH_KEYS:
        return None
    rows, run_pipeline = data["rows"], data.get("run_pipeline", True)
    if type(rows) is not list or type(run_pipeline) is not bool or not all(type(r) is dict for r in rows):
        return None
    return rows, run_pipeline


def _sql_args(headers: dict[bytes, bytes], body: bytes) -> tuple[str, bool] | None:
    """``(query, count)`` of a body FastAPI would accept as ``api.doors.rest.sql.SqlIn``
    as it is, or ``None`` to leave the request to FastAPI (its validation errors included)."""
    data = _json_body(headers, body)
    if not isinstance(data, dict) or not data.keys() <= _SQL_KEYS:
        return None
    query, count = data.get("query"), data.get("count", False)
    if type(query) is not str or type(count) is not bool:  # pydantic would coerce other types
        return None
    return query, count


def _headers(scope: Scope) -> dict[bytes, bytes]:
    """The request headers the fast path reads (the first of each): as the front layer read
    them (scope state ``wds_headers``), else scanned here."""
    read = scope.get("state", {}).get(HEADERS_KEY)
    if read is not None:
        return read  # type: ignore[no-any-return]
    out: dict[bytes, bytes] = {}
    for name, value in scope.get("headers", ()):
        if name in _HEADERS:
            out.setdefault(name, value)
    return out



