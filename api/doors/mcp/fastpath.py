"""A direct route for the hot MCP request: a stateless, JSON-response ``tools/call`` POST.

For every request, the SDK's stateless Streamable HTTP mode builds a transport with its
memory streams and message-router task, a JSON-RPC dispatcher and a server task in the
session manager's task group, and passes the answer back through those streams — about
0.6 ms of a 2 ms ``list_records`` call (issue #7; docs/decisions.md, "MCP fast path").

This module serves exactly one shape of request without that machinery, and serves it
with the SDK's own parts:

* the same checks, in the same order, as the SDK's manager and transport (body limit,
  protocol-version routing, Content-Type, Accept, ``pydantic_core.from_json`` and
  ``mcp_types.jsonrpc_message_adapter``); whatever does not pass all of them, or is not a
  ``tools/call`` request, is left to the SDK, which answers it (or its error) itself;
* the SDK's single-request kernel ``mcp.server.runner.serve_one`` with the connection the
  stateless manager builds (``Connection.from_envelope``): the server's middleware
  (OpenTelemetry), ``CallToolRequestParams`` validation, our ``tools/call`` handler and
  the per-version result serialization all run exactly as on the SDK path;
* or, when the server has no middleware (tracing off) and the caller gives the handler's
  context-free form (``direct``), the kernel's steps for ``tools/call`` called one by one
  (:func:`call_directly`): the same surface and params validation, the handler, and the
  kernel's own ``ServerRunner._serialize``, without building the per-request connection,
  session and context or unwinding the connection's (empty) exit stack under a shielded
  cancel scope — ~0.1 ms of a call that no tool handler of ours reads;
* the SDK's JSON-RPC envelope types (``JSONRPCResponse`` / ``JSONRPCError``, exceptions
  mapped by ``handler_exception_to_error_data``, others as code 0 like the SDK's dispatcher)
  dumped as the SDK's transport dumps them, in a response with the same status and headers.

Authentication, limits and the principal on the ASGI scope are done by the caller
(:class:`api.doors.mcp.server.McpDoor`) before either path, so tenant isolation is unchanged.
``WDS_MCP_FAST_PATH=false`` turns this off; the tests compare both paths byte for byte.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, cast
from weakref import WeakKeyDictionary

import anyio
import orjson
import pydantic_core
from mcp.server.connection import Connection
from mcp.server.lowlevel import Server
from mcp.server.runner import ServerRunner, serve_one
from mcp.server.streamable_http import CONTENT_TYPE_JSON, check_accept_headers
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
from mcp.shared.message import MessageMetadata, ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import (
    DEFAULT_NEGOTIATED_VERSION,
    METHOD_NOT_FOUND,
    ErrorData,
    JSONRPCError,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
    jsonrpc_message_adapter,
)
from mcp_types import methods as mcp_methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from storage import jsontext

log = logging.getLogger("wds.mcp")

FAST_METHODS = frozenset({"tools/call"})
_VERSION_HEADER = MCP_PROTOCOL_VERSION_HEADER.lower().encode("ascii")  # ASGI header names are lower case
# the stateless manager's transport context: no back-channel (no session to answer on)
_TRANSPORT = TransportContext(kind="streamable-http", can_send_request=False)


@dataclass
class JsonResponseDispatchContext:
    """The SDK ``DispatchContext`` of one request answered with a single JSON body.

    As on the SDK's stateless JSON-response path: server-initiated requests are refused
    (``NoBackChannelError``), and notifications or progress tied to the request are
    dropped, because a JSON body carries only the response (the SDK's message router
    drops them in JSON-response mode too).
    """

    request_id: RequestId
    message_metadata: MessageMetadata
    transport: TransportContext = _TRANSPORT
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)

    @property
    def can_send_request(self) -> bool:
        return False

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None:
        log.debug("dropped %s: a JSON response carries only the answer", method)

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        return None


class HeldResult:
    """A ``tools/call`` result whose JSON the fast path writes itself.

    The SDK's kernel validates a tool's result against the protocol version's
    ``CallToolResult`` and dumps it with pydantic, which walks every value of a page of
    records twice (about 0.15 ms of a 1 ms ``list_records`` call). For a result of JSON
    values only (:class:`api.doors.mcp.spec.JsonValues`) the handler instead hands the SDK the
    same result with an empty text and empty structured content, so the SDK still decides
    the envelope (which fields this version has, ``isError``, ``_meta``), and this writes
    the data into it: its orjson bytes as the structured content and, as a string, the
    text. orjson writes JSON values as pydantic does, so the bytes are the SDK path's
    (``tests/mcp/test_fast_path.py`` compares both paths byte for byte).
    """

    __slots__ = ("raw",)

    def __init__(self) -> None:
        self.raw: bytes | None = None

    def hold(self, data: dict[str, Any],
             wire: Callable[..., dict[str, Any]]) -> dict[str, Any]:
        """Keep ``data``'s JSON; the wire result (``wire(True, {}, text="")``) for the SDK."""
        self.raw = jsontext.dumps(data)
        return wire(True, {}, text="")

    def fill(self, result: Any) -> Any:
        """The SDK's serialized ``result`` with the held data written in."""
        if self.raw is None or not isinstance(result, dict):
            return result
        out = dict(result)
        if out.get("structuredContent") == {}:
            out["structuredContent"] = orjson.Fragment(self.raw)
        content = out.get("content")
        if (isinstance(content, list) and content and isinstance(content[0], dict)
                and content[0].get("type") == "text" and content[0].get("text") == ""):
            # the SDK's item, keys in its order, with the text written in
            out["content"] = [{**content[0], "text": self.raw.decode()}, *content[1:]]
        return out


_HELD: ContextVar[HeldResult | None] = ContextVar("wds_mcp_held_result", default=None)


def held_result() -> HeldResult | None:
    """The fast path's :class:`HeldResult` of the request being answered (``None`` off it)."""
    return _HELD.get()


_WANTED = (b"content-length", _VERSION_HEADER, b"content-type", b"accept")


class _AcceptOnly:
    """What :func:`check_accept_headers` reads of a request: its ``Accept`` header."""

    __slots__ = ("headers",)

    def __init__(self, accept: bytes | None) -> None:
        self.headers = {} if accept is None else {"accept": accept.decode("latin-1")}


def _first_headers(scope: Scope) -> dict[bytes, bytes]:
    """The first value of each header the checks read (as Starlette's ``Headers.get`` and the
    SDK's manager read them: ASGI header names are lower case)."""
    found: dict[bytes, bytes] = {}
    for key, value in scope["headers"]:
        if key in _WANTED and key not in found:
            found[key] = value
    return found


def _eligible(scope: Scope, max_body: int) -> str | None:
    """The protocol version (or ``""`` for none) if the headers allow the fast path, else ``None``."""
    if scope.get("method") != "POST":
        return None
    headers = _first_headers(scope)
    length = headers.get(b"content-length")
    if length is not None:
        try:
            if int(length) > max_body:
                return None  # the SDK answers 413
        except ValueError:
            pass
    raw = headers.get(_VERSION_HEADER)
    version = raw.decode("latin-1") if raw is not None else ""
    if raw is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return None  # the SDK's 2026-era single-exchange entry (or its rejection)
    raw_type = headers.get(b"content-type")
    # TransportSecurityMiddleware (always on for POST) and then the transport's own check
    if raw_type is None:
        return None
    content_type = raw_type.decode("latin-1")
    if not content_type.lower().startswith(CONTENT_TYPE_JSON):
        return None
    if not any(p.strip() == CONTENT_TYPE_JSON for p in content_type.split(";")[0].split(",")):
        return None
    if not check_accept_headers(cast(Request, _AcceptOnly(headers.get(b"accept"))))[0]:
        return None  # 406 from the SDK
    return version


async def _read_body(receive: Receive, max_body: int) -> tuple[bytes | None, deque[Message]]:
    """The whole body (``None`` if it did not arrive whole within ``max_body``) and the
    messages read, for replay to the SDK."""
    seen: deque[Message] = deque()
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        seen.append(message)
        if message["type"] != "http.request":
            return None, seen
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_body:
            return None, seen
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), seen


def replaying(seen: deque[Message], receive: Receive) -> Receive:
    """``receive`` that first hands back the messages already read."""

    async def replay() -> Message:
        if seen:
            return seen.popleft()
        return await receive()

    return replay


def parse_fast_request(body: bytes) -> JSONRPCRequest | None:
    """The body as a JSON-RPC request the fast path serves, parsed as the SDK's transport
    parses it; ``None`` for anything else (the SDK answers it, errors included)."""
    try:
        message = jsonrpc_message_adapter.validate_python(pydantic_core.from_json(body), by_name=False)
    except (ValueError, ValidationError):  # pydantic's ValidationError is a ValueError too
        return None
    if not isinstance(message, JSONRPCRequest) or message.method not in FAST_METHODS:
        return None
    return message


DirectCall = Callable[[Request, Any], Awaitable[Any]]
"""The ``tools/call`` handler without the SDK's context: ``(request, typed params) -> result``."""


class _Kernel:
    """Per server: the SDK kernel whose ``_serialize`` shapes results (it reads only the
    server), and its output for the held skeleton per version (a pure function of both)."""

    def __init__(self, server: Server[Any]) -> None:
        connection = Connection.from_envelope(DEFAULT_NEGOTIATED_VERSION, None, None)
        self.runner: ServerRunner[Any] = ServerRunner(server, connection, None)
        self.skeletons: dict[tuple[str, bytes], dict[str, Any]] = {}

    def serialize(self, method: str, version: str, result: Any, held: HeldResult | None) -> dict[str, Any]:
        if held is None or held.raw is None or not isinstance(result, dict):
            return self.runner._serialize(method, version, result)
        key = (version, jsontext.dumps(result))
        wire = self.skeletons.get(key)
        if wire is None:
            if len(self.skeletons) >= 64:
                self.skeletons.clear()
            wire = self.skeletons[key] = self.runner._serialize(method, version, result)
        # HeldResult.fill writes into a copy and leaves the nested values as they are
        return dict(wire)


_KERNELS: WeakKeyDictionary[Server[Any], _Kernel] = WeakKeyDictionary()


async def call_directly(server: Server[Any], call: DirectCall, request: Request, req: JSONRPCRequest,
                        version: str, held: HeldResult | None) -> dict[str, Any]:
    """``ServerRunner._on_request``'s steps for a ``tools/call`` on a server without
    middleware: surface validation at ``version``, the handler's params type, the handler
    (``call``, the registered handler's context-free form) and ``_serialize``. Raises what
    those raise, as the kernel does."""
    kernel = _KERNELS.get(server)
    if kernel is None:
        kernel = _KERNELS[server] = _Kernel(server)
    method, params = req.method, req.params
    try:
        mcp_methods.validate_client_request(method, version, params)
    except KeyError:
        raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=method) from None
    entry = server.get_request_handler(method)
    if entry is None:
        raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=method)
    typed = entry.params_type.model_validate({} if params is None else params, by_name=False)
    result = await call(request, typed)
    if isinstance(result, ErrorData):
        raise MCPError.from_error_data(result)
    return kernel.serialize(method, version, result, held)


async def answer(server: Server[Any], lifespan_state: Any, request: Request, req: JSONRPCRequest,
                 version: str, *, direct: DirectCall | None = None,
                 held: HeldResult | None = None) -> JSONRPCResponse | JSONRPCError:
    """Run ``req`` through the SDK's single-request kernel, as the stateless manager would
    (through its steps alone, :func:`call_directly`, when ``direct`` is given and the
    server has no middleware)."""
    version = version or DEFAULT_NEGOTIATED_VERSION
    try:
        if direct is not None and not server.middleware:
            result = await call_directly(server, direct, request, req, version, held)
        else:
            connection = Connection.from_envelope(version, None, None)
            dctx = JsonResponseDispatchContext(
                request_id=req.id,
                message_metadata=ServerMessageMetadata(request_context=request, can_send_request=False),
            )
            result = await serve_one(server, dctx, req.method, req.params, connection=connection,
                                     lifespan_state=lifespan_state)
    except Exception as exc:
        # the SDK dispatcher's exception-to-wire boundary (code 0 for an unmapped exception)
        error = handler_exception_to_error_data(exc)
        if error is None:
            log.exception("handler for %r raised", req.method)
            error = ErrorData(code=0, message=str(exc))
        return JSONRPCError(jsonrpc="2.0", id=req.id, error=error)
    return JSONRPCResponse(jsonrpc="2.0", id=req.id, result=result)


def json_body(message: JSONRPCResponse | JSONRPCError, held: HeldResult | None = None) -> bytes:
    """The JSON-RPC message as the SDK's transport writes it in JSON-response mode.

    A response's ``result`` is already the SDK's per-version wire dict; orjson writes the
    same bytes as ``model_dump_json`` (compact, keys in order, UTF-8 unescaped; the tests
    compare both paths byte for byte) in a third of the time on a page of records.
    """
    if isinstance(message, JSONRPCResponse):
        result = held.fill(message.result) if held is not None else message.result
        return jsontext.dumps({"jsonrpc": message.jsonrpc, "id": message.id, "result": result})
    return message.model_dump_json(by_alias=True, exclude_unset=True).encode()


_JSON_TYPE = CONTENT_TYPE_JSON.encode("latin-1")


async def send_json(send: Send, body: bytes) -> None:
    """A 200 with ``body`` and the headers Starlette's ``Response`` writes for the SDK's
    transport (its ``Content-Type``, then ``Content-Length``)."""
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", _JSON_TYPE), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def serve(server: Server[Any], lifespan_state: Any, scope: Scope, receive: Receive, send: Send, *,
                max_body: int, direct: DirectCall | None = None) -> Receive | None:
    """Answer the request if it is a fast-path ``tools/call``; returns ``None`` when it was
    answered, else the ``receive`` to hand to the SDK (replaying any body already read).
    ``direct`` is the server's ``tools/call`` handler without the SDK context
    (:func:`call_directly`)."""
    version = _eligible(scope, max_body)
    if version is None:
        return receive
    body, seen = await _read_body(receive, max_body)
    req = parse_fast_request(body) if body is not None else None
    if req is None:
        return replaying(seen, receive)
    # the handler's Request can still read the body, as on the SDK path
    held = HeldResult()
    token = _HELD.set(held)
    try:
        message = await answer(server, lifespan_state, Request(scope, replaying(seen, receive)), req, version,
                               direct=direct, held=held)
    finally:
        _HELD.reset(token)
    await send_json(send, json_body(message, held))
    return None
