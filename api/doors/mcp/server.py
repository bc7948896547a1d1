"""The MCP door: ``{base_url}/functions/v1/mcp-server`` over Streamable HTTP (JSON-RPC 2.0).

Built on the official SDK's low-level ``Server`` because the tool list depends on the
caller (12 data tools, or 56 for the builder credential). The transport is stateless
with plain JSON responses, so any API process can answer any request and nothing is
kept between requests. Every request carries ``Authorization: Bearer``; the token is
resolved here, before the SDK sees the request, and put on the ASGI scope for the
handlers. The SDK negotiates the protocol revision: a client asking for 2025-06-18 gets
2025-06-18, and newer revisions the SDK knows are served when a client asks for them.
Plain ``tools/call`` POSTs skip the SDK's per-request stateless transport and run through
its single-request kernel inline (:mod:`api.doors.mcp.fastpath`, same bytes on the wire).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any

import mcp_types as types
import orjson
from fastapi import APIRouter, Depends, FastAPI, Request
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from api.deps import StateDep, bearer, resolve_principal
from api.doors.mcp import catalog, fastpath
from api.doors.mcp.spec import JsonValues, ToolSpec
from api.errors import error_response
from api.responses import JSON
from api.schemas import ErrorOut
from api.services import limits
from api.state import AppState
from service import tracing
from storage import jsontext
from storage.access import Principal, TokenType
from storage.errors import Forbidden, ServiceError

MCP_PATH = "/functions/v1/mcp-server"
SCOPE_KEY = "wds.principal"
INSTRUCTIONS = (
    "Workspace Data Service: typed tables. Start with list_tables and list_columns; read with"
    " list_records (filters {\"Column\": \"op.value\"}, follow has_more/hint to page) or sql_query;"
    " writes run the table's computed columns and return their values."
)


async def mcp_principal(state: AppState, request: Request) -> Principal:
    """The calling principal on the MCP door: 401 without a valid token, 403 for rest_api."""
    principal = await resolve_principal(state, bearer(request))
    if principal.type is TokenType.REST_API:
        raise Forbidden("rest_api tokens work on the REST API only; use a user_mcp or vibe_mcp token",
                        code="WRONG_PROTOCOL")
    return principal


def _tool(spec: ToolSpec) -> types.Tool:
    return types.Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description,
        input_schema=spec.input_schema,
        output_schema=spec.output_schema,
        annotations=types.ToolAnnotations(
            title=spec.title, read_only_hint=spec.read_only, destructive_hint=spec.destructive,
            idempotent_hint=spec.idempotent, open_world_hint=False,
        ),
    )


def call_tool_result(ok: bool, data: dict[str, Any], *, text: str | None = None) -> dict[str, Any]:
    """A tool's answer as the wire form of ``CallToolResult``: the data as structured content
    and the same JSON as text content (``text``, when given, stands in for that JSON).

    What ``types.CallToolResult(...).model_dump(by_alias=True, mode="json", exclude_none=True)``
    gives, without that extra walk over every record of a page: the SDK validates and
    re-dumps the result through its per-version ``CallToolResult`` surface either way
    (``tests/mcp/test_fast_path.py`` checks the two serialize identically).
    """
    if text is None:
        text = jsontext.dumps(data, option=orjson.OPT_NON_STR_KEYS).decode()
    return {"content": [{"type": "text", "text": text}], "structuredContent": data, "isError": not ok,
            "resultType": "complete"}


def _principal_of(request: Any) -> Principal:
    """The principal our endpoint put on the request's ASGI scope."""
    principal = request.scope.get(SCOPE_KEY) if request is not None else None
    if principal is None:
        # only reachable if the SDK were driven without our authenticating endpoint
        raise MCPError(types.INVALID_REQUEST, "unauthenticated request")
    return principal  # type: ignore[no-any-return]


class McpDoor:
    """The SDK server, its stateless session manager and the authenticating ASGI endpoint."""

    def __init__(self, state: AppState, *, version: str) -> None:
        self.state = state
        self.server: Server[AppState] = Server(
            "workspace-data-service",
            version=version,
            title="Workspace Data Service",
            instructions=INSTRUCTIONS,
            lifespan=self._lifespan,
            get_tool_input_schema=catalog.input_schema,
            on_list_tools=self._list_tools,
        )
        if not tracing.wanted(state.settings.otel):
            # without a tracer provider the SDK's OpenTelemetry middleware only makes
            # non-recording spans: ~40 µs of every call (both paths; tracing on keeps it)
            self.server.middleware = [m for m in self.server.middleware
                                      if not isinstance(m, OpenTelemetryMiddleware)]
        # registered as a plain request handler so it may answer with the wire dict
        # (see ``_call_tool``); same params type as ``on_call_tool`` would validate with
        self.server.add_request_handler("tools/call", types.CallToolRequestParams, self._call_tool)
        # built once: listing is the hottest call after tools/call
        self.lists = {
            False: [_tool(t) for t in catalog.DATA_TOOLS],
            True: [_tool(t) for t in catalog.ALL_TOOLS],
        }
        # no DNS-rebinding guard: every request needs a bearer token, which a browser
        # page on another origin cannot attach, and the API may sit behind any host name
        self.manager = StreamableHTTPSessionManager(
            app=self.server, json_response=True, stateless=True, security_settings=None,
        )
        # tools/call POSTs skip the SDK's per-request transport and task (api/doors/mcp/fastpath.py)
        self.fast_path = state.settings.mcp_fast_path
        self.route: Route | None = None  # set by install()

    @asynccontextmanager
    async def _lifespan(self, _: Server[AppState]) -> AsyncIterator[AppState]:
        yield self.state

    def run(self) -> AbstractAsyncContextManager[None]:
        """The session manager's task group; entered once in the app lifespan."""
        return self.manager.run()

    async def _list_tools(
        self, ctx: ServerRequestContext[AppState, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        principal = _principal_of(ctx.request)
        return types.ListToolsResult(tools=self.lists[catalog.has_builder_tools(principal)])

    async def _call_tool(
        self, ctx: ServerRequestContext[AppState, Any], params: types.CallToolRequestParams
    ) -> dict[str, Any]:
        return await self._tool_answer(_principal_of(ctx.request), params)

    async def _call_tool_direct(self, request: Request, params: types.CallToolRequestParams) -> dict[str, Any]:
        """``_call_tool`` without the SDK context, for the fast path (``fastpath.call_directly``)."""
        return await self._tool_answer(_principal_of(request), params)

    async def _tool_answer(self, principal: Principal, params: types.CallToolRequestParams) -> dict[str, Any]:
        try:
            spec = catalog.tool_for(principal, params.name)
        except catalog.UnknownTool as exc:
            # an unknown tool is a protocol error (spec: tools/call error handling)
            raise MCPError(types.INVALID_PARAMS, exc.message) from None
        ok, data = await catalog.run_tool(self.state, principal, spec, params.arguments)
        held = fastpath.held_result()
        if ok and held is not None and isinstance(data, JsonValues):
            # on the fast path, which writes the page's JSON itself (once, with orjson)
            return held.hold(data, call_tool_result)
        return call_tool_result(ok, data)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI endpoint: authenticate, then answer a ``tools/call`` on the fast path or hand
        the request to the SDK transport."""
        if scope["type"] != "http":
            return
        if self.route is not None:
            # FastAPI's router records only its own APIRoutes; without this the usage log
            # would match the path against every route template (api/middleware/usage.py route_template)
            scope["route"] = self.route
        try:
            principal = await mcp_principal(self.state, Request(scope))
            # the plan's rate limits and monthly request quota, as on REST (one HTTP request = one call)
            await limits.enforce_limits(self.state, principal, "mcp", scope=scope)
        except ServiceError as exc:
            headers = dict(exc.headers)
            if exc.status == 401:
                headers["WWW-Authenticate"] = 'Bearer realm="mcp"'
            await error_response(exc.status, exc.message, exc.code, headers or None, **exc.extra)(scope, receive, send)
            return
        scope[SCOPE_KEY] = principal
        if scope["method"] == "GET":
            # stateless: nothing is ever sent on a server-to-client stream, and the SDK held
            # one open for good, outside every limit (a tenant could pile them up). The MCP
            # transport lets a server answer 405 instead; clients then just POST
            await error_response(405, "this MCP server is stateless and opens no server-to-client stream:"
                                 " POST each JSON-RPC message", "METHOD_NOT_ALLOWED",
                                 {"Allow": "POST, DELETE"})(scope, receive, send)
            return
        if scope["method"] != "POST":  # session end (DELETE)
            await self.manager.handle_request(scope, receive, send)
            return
        try:
            release = await limits.runtime(self.state).gate.acquire(principal.workspace_id)
        except ServiceError as exc:  # WORKSPACE_BUSY: no slot came free in time
            await error_response(exc.status, exc.message, exc.code, exc.headers or None)(scope, receive, send)
            return
        try:
            await self._serve(scope, receive, send)
        finally:
            release()

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.fast_path:
            # our own lifespan state is what the manager's lifespan yields (``_lifespan``)
            rest = await fastpath.serve(self.server, self.state, scope, receive, send,
                                        max_body=self.manager.max_request_body_size,
                                        direct=self._call_tool_direct)
            if rest is None:
                return
            receive = rest
        await self.manager.handle_request(scope, receive, send)


router = APIRouter(prefix=MCP_PATH, tags=["mcp"])


async def _tools_principal(request: Request, state: StateDep) -> Principal:
    principal = await mcp_principal(state, request)
    await limits.enforce_limits(state, principal, "mcp", scope=request.scope)
    return principal


@router.get("/tools", responses={s: {"model": ErrorOut} for s in (401, 402, 403, 429, 503)})
async def list_tools(principal: Annotated[Principal, Depends(_tools_principal)]) -> JSON:
    """The calling token's live tool list (name, description, schemas, annotations)."""
    tools = [t.listing() for t in catalog.tools_for(principal)]
    return JSON({"tools": tools, "count": len(tools)})


def install(app: FastAPI, state: AppState, *, version: str) -> McpDoor:
    """Add the MCP endpoint and ``/tools`` to ``app``; enter ``door.run()`` in its lifespan."""
    door = McpDoor(state, version=version)
    app.include_router(router)
    # first in the table: the router tries it before walking the REST routes (an exact
    # path, so it shadows nothing); the usage log reads its template off ``scope["route"]``
    door.route = Route(MCP_PATH, endpoint=door)
    app.router.routes.insert(0, door.route)
    return door
