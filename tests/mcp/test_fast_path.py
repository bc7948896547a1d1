"""The MCP fast path (api/doors/mcp/fastpath.py) answers ``tools/call`` exactly as the SDK does.

In process: one SDK ``Server`` behind its own stateless JSON-response session manager and
behind the fast path; every request must get the same status, headers and body bytes,
and the fast path must take exactly the requests it is meant to. End to end: the API with
the fast path and an API process with ``WDS_MCP_FAST_PATH=false`` (SDK only) answer the
same raw requests byte for byte, successes, tool errors and protocol errors alike.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types import DEFAULT_NEGOTIATED_VERSION, methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.types import Message, Receive, Scope

from api.doors.mcp import fastpath
from api.doors.mcp.server import call_tool_result
from api.doors.mcp.spec import JsonValues
from tests.conftest import api_process
from tests.mcp.conftest import MCP_PATH

VERSIONS = [*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS]
SAMPLE = {"records": [{"id": 1, "fields": {"Name": "å ü \"q\" </script> \u2028", "Score": 1.5e300, "n": None,
                                           "big": 2**60, "neg": -0.0, "list": [True, False, {}]},
                       "created_at": "2026-01-02T03:04:05.123456+00:00"}],
          "limit": 25, "offset": 0, "total": 1, "has_more": False}


# --------------------------------------------------------------------------- result shape


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("ok,data", [(True, SAMPLE), (False, {"error": "no such table", "code": "NOT_FOUND"}),
                                     (True, {})])
def test_the_tool_result_dict_serializes_as_the_sdk_model_does(version, ok, data):
    text = json.dumps(data)
    model = types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=data,
                                 is_error=not ok)
    via_model = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    via_dict = call_tool_result(ok, data)
    assert json.loads(via_dict["content"][0]["text"]) == data
    via_dict["content"][0]["text"] = text  # orjson vs json spacing: compare the envelope
    assert via_dict == via_model
    assert (methods.serialize_server_result("tools/call", version, via_dict)
            == methods.serialize_server_result("tools/call", version, via_model))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("data", [SAMPLE, {}, {"records": [], "note": "ü \u2028 </script>", "x": [1.5, -0.0, None]}])
def test_a_held_result_is_written_as_the_sdk_writes_the_whole_result(version, data):
    """The fast path's :class:`fastpath.HeldResult` (the SDK serializes an empty result and
    the data is written in after) gives the bytes of the SDK serializing the whole result."""
    envelope = {"jsonrpc": "2.0", "id": 7}
    whole = types.JSONRPCResponse(**envelope, result=methods.serialize_server_result(
        "tools/call", version, call_tool_result(True, data)))
    held = fastpath.HeldResult()
    skeleton = held.hold(JsonValues(data), call_tool_result)
    assert skeleton["content"][0]["text"] == "" and skeleton["structuredContent"] == {}
    filled = fastpath.json_body(
        types.JSONRPCResponse(**envelope, result=methods.serialize_server_result("tools/call", version, skeleton)),
        held)
    assert filled == fastpath.json_body(whole)
    assert filled == whole.model_dump_json(by_alias=True, exclude_unset=True).encode()


# --------------------------------------------------------------------------- in process


HELD_PAGE = {"records": SAMPLE["records"], "limit": 25, "offset": 0, "has_more": True, "hint": "more"}


async def toy_answer(request: Any, version: str, params: types.CallToolRequestParams,
                     session: Any = None) -> Any:
    """The toy ``tools/call`` handler; the SDK passes its context's parts, the direct path
    the request alone (as ``api.doors.mcp.server.McpDoor`` does)."""
    args = params.arguments or {}
    if params.name == "echo":
        assert request.scope["wds.test"] == "scope seen"  # the handler sees the ASGI scope
        assert json.loads(await request.body())["params"]["name"] == "echo"  # and the body
        return call_tool_result(True, {"args": args, "version": version})
    if params.name == "held":
        held = fastpath.held_result()
        data = JsonValues(HELD_PAGE)
        return held.hold(data, call_tool_result) if held is not None else call_tool_result(True, data)
    if params.name == "tool_error":
        return call_tool_result(False, {"error": "nope", "code": "FORBIDDEN"})
    if params.name == "unknown":
        raise MCPError(types.INVALID_PARAMS, "unknown tool 'unknown'")
    if params.name == "validation":
        types.Tool.model_validate({})  # a pydantic ValidationError escaping the handler
    if params.name == "crash":
        raise RuntimeError("boom")
    if params.name == "model":
        return types.CallToolResult(content=[types.TextContent(type="text", text="{}")], structured_content={})
    if params.name == "error data":
        return types.ErrorData(code=-32001, message="returned, not raised")
    if params.name == "notify":
        if session is not None:  # a JSON response carries only the answer: the SDK drops this
            await session.send_log_message(level="info", data="hi", related_request_id=1)
        return call_tool_result(True, {})
    raise AssertionError(params.name)


async def toy_direct(request: Any, params: types.CallToolRequestParams) -> Any:
    version = request.headers.get("mcp-protocol-version") or DEFAULT_NEGOTIATED_VERSION
    return await toy_answer(request, version, params)


def toy_server() -> Server[Any]:
    async def call(ctx: Any, params: types.CallToolRequestParams) -> Any:
        return await toy_answer(ctx.request, ctx.protocol_version, params, ctx.session)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name="echo", input_schema={"type": "object"})])

    server: Server[Any] = Server("toy", version="1", on_list_tools=list_tools)
    server.add_request_handler("tools/call", types.CallToolRequestParams, call)
    return server


class Captured:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def send(self, message: Message) -> None:
        self.messages.append(message)

    def result(self) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        start = next(m for m in self.messages if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in self.messages if m["type"] == "http.response.body")
        return start["status"], sorted(start["headers"]), body


def scope_for(headers: dict[str, str], method: str = "POST") -> Scope:
    return {"type": "http", "method": method, "path": MCP_PATH, "raw_path": MCP_PATH.encode(), "root_path": "",
            "query_string": b"", "scheme": "http", "server": ("test", 80), "client": ("127.0.0.1", 1),
            "http_version": "1.1", "asgi": {"version": "3"}, "wds.test": "scope seen",
            "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]}


def receiver(body: bytes, chunks: int = 1) -> Receive:
    size = max(1, -(-len(body) // chunks))
    parts = [body[i:i + size] for i in range(0, len(body), size)] or [b""]
    messages: list[Message] = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1}
                               for i, p in enumerate(parts)]

    async def receive() -> Message:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    return receive


@asynccontextmanager
async def both_paths(direct: bool = False, middleware: bool = False) -> AsyncIterator[Any]:
    """The SDK's own answer and the fast path's, through the kernel (``serve_one``) or,
    with ``direct``, through its steps alone (``fastpath.call_directly``)."""
    server = toy_server()
    if middleware:
        server.middleware = [passing_middleware]
    manager = StreamableHTTPSessionManager(app=server, json_response=True, stateless=True, security_settings=None)
    async with manager.run():

        async def via_sdk(scope: Scope, body: bytes, chunks: int) -> tuple[Any, bool]:
            sent = Captured()
            await manager.handle_request(scope, receiver(body, chunks), sent.send)
            return sent.result(), False

        async def via_fast(scope: Scope, body: bytes, chunks: int) -> tuple[Any, bool]:
            sent = Captured()
            rest = await fastpath.serve(server, None, scope, receiver(body, chunks), sent.send,
                                        max_body=manager.max_request_body_size,
                                        direct=toy_direct if direct else None)
            if rest is not None:  # declined: the SDK answers, replaying what was read
                await manager.handle_request(scope, rest, sent.send)
            return sent.result(), rest is None

        yield via_sdk, via_fast


async def passing_middleware(ctx: Any, call_next: Any) -> Any:
    return await call_next(ctx)


JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def call(name: str, args: Any = None, rid: Any = 1, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, **extra}
    if args is not None:
        params["arguments"] = args
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


FAST_CASES = {
    "echo": (call("echo", {"a": [1, 2.5, "ü"]}), {}),
    "echo string id": (call("echo", {}, rid="req-7"), {}),
    "no arguments": (call("echo"), {}),
    "progress token": (call("echo", {}, _meta={"progressToken": "p1"}), {}),
    "tool error": (call("tool_error", {}), {}),
    "unknown tool": (call("unknown", {}), {}),
    "handler validation error": (call("validation", {}), {}),
    "handler crash": (call("crash", {}), {}),
    "model result": (call("model", {}), {}),
    "error data result": (call("error data", {}), {}),
    "held page": (call("held", {}), {}),
    "held page 2024-11-05": (call("held", {}), {"MCP-Protocol-Version": "2024-11-05"}),
    "held page 2025-11-25": (call("held", {}), {"MCP-Protocol-Version": "2025-11-25"}),
    "notification dropped": (call("notify", {}), {}),
    "params missing name": ({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"arguments": {}}}, {}),
    "params not an object": ({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": 5}}, {}),
    "no params": ({"jsonrpc": "2.0", "id": 3, "method": "tools/call"}, {}),
    "version 2024-11-05": (call("echo", {}), {"MCP-Protocol-Version": "2024-11-05"}),
    "version 2025-06-18": (call("echo", {}), {"MCP-Protocol-Version": "2025-06-18"}),
    "version 2025-11-25": (call("echo", {}), {"MCP-Protocol-Version": "2025-11-25"}),
    "accept */*": (call("echo", {}), {"Accept": "*/*"}),
    "json accept only": (call("echo", {}), {"Accept": "application/json"}),
    "content type with charset": (call("echo", {}), {"Content-Type": "application/json; charset=utf-8"}),
}
SDK_CASES = {
    "tools/list": ({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, {}),
    "initialize": ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}, {}),
    "notification": ({"jsonrpc": "2.0", "method": "notifications/initialized"}, {}),
    "batch": ([call("echo", {})], {}),
    "response": ({"jsonrpc": "2.0", "id": 1, "result": {}}, {}),
    "not JSON": (b"{nope", {}),
    "wrong jsonrpc": ({"jsonrpc": "1.0", "id": 1, "method": "tools/call", "params": {"name": "echo"}}, {}),
    "modern revision": (call("echo", {}), {"MCP-Protocol-Version": "2026-07-28"}),
    "unknown revision": (call("echo", {}), {"MCP-Protocol-Version": "1999-01-01"}),
    "no json accept": (call("echo", {}), {"Accept": "text/event-stream"}),
    "text content type": (call("echo", {}), {"Content-Type": "text/plain"}),
    "form content type": (call("echo", {}), {"Content-Type": "application/jsonx"}),
    "too large": (call("echo", {"x": "y" * (4 * 1024 * 1024)}), {}),
}


def _body(payload: Any) -> bytes:
    return payload if isinstance(payload, bytes) else json.dumps(payload).encode()


@pytest.mark.parametrize("case", sorted(FAST_CASES) + sorted(SDK_CASES))
@pytest.mark.parametrize("chunks", [1, 3])
@pytest.mark.parametrize("kernel", ["serve_one", "direct", "direct declined (middleware)"])
async def test_fast_path_and_sdk_answer_byte_for_byte(case, chunks, kernel):
    payload, headers = FAST_CASES.get(case) or SDK_CASES[case]
    scope = scope_for({**JSON_HEADERS, **headers})
    body = _body(payload)
    async with both_paths(direct=kernel != "serve_one", middleware="middleware" in kernel) as (via_sdk, via_fast):
        sdk, _ = await via_sdk(dict(scope), body, chunks)
        fast, took_fast_path = await via_fast(dict(scope), body, chunks)
    assert fast == sdk
    assert took_fast_path == (case in FAST_CASES)
    if case in FAST_CASES:
        assert sdk[0] == 200 and json.loads(sdk[2])["jsonrpc"] == "2.0"


async def test_declared_oversize_body_and_other_methods_go_to_the_sdk():
    async with both_paths() as (via_sdk, via_fast):
        for headers, method in (({"Content-Length": str(5 * 1024 * 1024)}, "POST"),
                                ({"Accept": "application/json"}, "GET"), ({}, "DELETE")):
            scope = scope_for({**JSON_HEADERS, **headers}, method)
            body = b"" if method != "POST" else _body(call("echo", {}))
            sdk, _ = await via_sdk(dict(scope), body, 1)
            fast, took = await via_fast(dict(scope), body, 1)
            assert fast == sdk and not took


async def test_direct_answers_stay_identical_when_repeated():
    """The direct path remembers the SDK's shaping of a held result's skeleton per version;
    later answers (and other tools' between them) must still be the SDK's bytes."""
    async with both_paths(direct=True) as (via_sdk, via_fast):
        for _ in range(3):
            for case in ("held page", "held page 2024-11-05", "echo", "tool error", "held page 2025-11-25"):
                payload, headers = FAST_CASES[case]
                scope = scope_for({**JSON_HEADERS, **headers})
                sdk, _ = await via_sdk(dict(scope), _body(payload), 1)
                fast, took = await via_fast(dict(scope), _body(payload), 1)
                assert fast == sdk and took, case


async def test_direct_path_is_taken_only_without_middleware(monkeypatch):
    """With tracing on the server has middleware, which must see every call: the SDK kernel."""
    seen: list[str] = []

    async def counting(ctx: Any, call_next: Any) -> Any:
        seen.append(ctx.method)
        return await call_next(ctx)

    async with both_paths(direct=True) as (_, via_fast):
        await via_fast(scope_for(JSON_HEADERS), _body(call("echo", {})), 1)
    assert seen == []
    server = toy_server()
    server.middleware = [counting]
    sent = Captured()
    rest = await fastpath.serve(server, None, scope_for(JSON_HEADERS), receiver(_body(call("echo", {}))), sent.send,
                                max_body=1 << 20, direct=toy_direct)
    assert rest is None and seen == ["tools/call"]
    assert json.loads(sent.result()[2])["result"]["structuredContent"]["args"] == {}


def test_parse_fast_request_takes_only_single_tools_call_requests():
    assert fastpath.parse_fast_request(_body(call("echo", {}))) is not None
    for payload in (SDK_CASES[c][0] for c in ("tools/list", "notification", "batch", "response", "not JSON",
                                              "wrong jsonrpc")):
        assert fastpath.parse_fast_request(_body(payload)) is None


# --------------------------------------------------------------------------- end to end

COLUMNS = [{"name": "Name", "type": "text"}, {"name": "Score", "type": "number"},
           {"name": "Status", "type": "single_select", "options": ["a", "b"]},
           {"name": "When", "type": "date"}, {"name": "Done", "type": "checkbox"}]


@pytest.fixture(scope="module")
def sdk_only_url(services: Any) -> Iterator[str]:
    """An API process on the same database with the fast path off: every request via the SDK."""
    with api_process(services, name="api-mcp-sdk-only", WDS_MCP_FAST_PATH="false") as url:
        yield url


def test_api_fast_path_and_sdk_only_api_answer_identically(ws, base_url, sdk_only_url):
    table = ws.create_table("Things", COLUMNS)
    rows = [{"fields": {"Name": f"n{i} ü \"x\"", "Score": i * 1.5 if i % 3 else i, "Status": "ab"[i % 2],
                        "When": f"2026-01-{1 + i % 28:02d}T10:00:00.{i:06d}Z", "Done": bool(i % 2)}}
            for i in range(60)]
    r = ws.api.post(f"/tables/{table['id']}/records/batch", json={"rows": rows})
    assert r.status_code == 200, r.text
    user = ws.token("user_mcp", profile_id=ws.profile([])["id"])["token"]  # no table granted

    def list_call(**args: Any) -> dict[str, Any]:
        return call("list_records", {"table_id": table["id"], **args})

    v0618 = {"MCP-Protocol-Version": "2025-06-18"}
    builder = ws.builder_token
    # (token, body, extra headers, expected: "ok", a tool error code, or a JSON-RPC error code)
    requests: list[tuple[str, Any, dict[str, str], Any]] = [
        (builder, list_call(filters={"Score": "gt.10", "Status": "eq.a"}, order="id.asc", limit=20), v0618, "ok"),
        (builder, list_call(select="Name,When", order="Score.desc", limit=5, offset=3), {}, "ok"),
        (builder, list_call(filters=[{"column": "Done", "op": "eq", "value": "true"}], limit=200),
         {"MCP-Protocol-Version": "2025-11-25"}, "ok"),
        (builder, list_call(offset=1000), v0618, "ok"),
        (builder, call("list_records", {"table_id": "Things"}, rid="s-1"), {}, "ok"),
        (builder, list_call(limit=1001), {}, "LIMIT_TOO_LARGE"),
        (builder, list_call(limit=10.5), {}, "VALIDATION_ERROR"),
        (builder, list_call(limit=10.0), {}, "ok"),
        (builder, list_call(filters={"Nope": "eq.1"}), {}, "UNKNOWN_COLUMN"),
        (builder, list_call(bogus=1), {}, "UNKNOWN_PARAMETER"),
        (builder, call("get_record", {"table_id": table["id"], "record_id": 1, "view": "x"}), {}, "UNKNOWN_PARAMETER"),
        (builder, call("get_table", {"table_id": table["id"], "bogus": 1}), {}, "UNKNOWN_PARAMETER"),
        (builder, call("list_records", {"table_id": "Missing"}), {}, "NOT_FOUND"),
        (builder, call("no_such_tool", {}), {}, -32602),
        (builder, {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {}}, {}, -32602),
        (builder, call("list_tables", {}), {}, "ok"),
        (builder, call("list_columns", {"table_id": table["id"]}), {}, "ok"),
        (builder, call("get_table", {"table_id": table["id"]}), {}, "ok"),  # a builder tool
        (builder, call("sql_query", {"query": "SELECT Name, Score FROM Things ORDER BY id LIMIT 3"}), {}, "ok"),
        # no grant on the table: FORBIDDEN though the builder's same call above warmed the statement memo
        (user, list_call(), {}, "FORBIDDEN"),
        (user, call("get_table", {"table_id": table["id"]}), {}, -32602),  # builder tools are invisible
        (user, call("list_tables", {}), {}, "ok"),
        (builder, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, {}, "ok"),  # the SDK on both
        # the modern entry on both (this body lacks its _meta envelope)
        (builder, list_call(), {"MCP-Protocol-Version": "2026-07-28"}, -32602),
    ]
    with httpx.Client(timeout=60) as http:
        for token, payload, extra, expected in requests:
            headers = {**JSON_HEADERS, "Authorization": f"Bearer {token}", **extra}
            fast = http.post(base_url + MCP_PATH, content=_body(payload), headers=headers)
            sdk = http.post(sdk_only_url + MCP_PATH, content=_body(payload), headers=headers)
            assert (fast.status_code, fast.headers.get("content-type")) == (sdk.status_code,
                                                                          sdk.headers.get("content-type")), payload
            assert fast.content == sdk.content, payload
            answer = fast.json()
            if isinstance(expected, int):
                assert answer["error"]["code"] == expected, answer
            elif expected == "ok":
                assert not answer["result"].get("isError"), answer
            else:
                assert answer["result"]["isError"] and answer["result"]["structuredContent"]["code"] == expected
        # authentication still comes first on the fast path
        for headers, status in (({}, 401), ({"Authorization": "Bearer nope"}, 401)):
            fast = http.post(base_url + MCP_PATH, content=_body(list_call()), headers={**JSON_HEADERS, **headers})
            assert fast.status_code == status and fast.json()["code"] == "UNAUTHORIZED"
        rest = ws.token("rest_api")["token"]
        fast = http.post(base_url + MCP_PATH, content=_body(list_call()),
                         headers={**JSON_HEADERS, "Authorization": f"Bearer {rest}"})
        assert fast.status_code == 403 and fast.json()["code"] == "WRONG_PROTOCOL"


def test_list_records_pages_match_rest(ws, base_url):
    """The tool's page is the REST page (both rendered by PostgreSQL), with the total."""
    table = ws.create_table("Pages", COLUMNS)
    rows = [{"fields": {"Name": f"r{i}", "Score": i / 4, "Status": "ab"[i % 2],
                        "When": f"2026-03-01T10:00:{i % 60:02d}.{(i * 10) % 1000000:06d}Z"}} for i in range(30)]
    assert ws.api.post(f"/tables/{table['id']}/records/batch", json={"rows": rows}).status_code == 200
    rest = ws.api.get(f"/tables/{table['id']}/records", params={"Score": "gt.2", "order": "Score.desc",
                                                                 "limit": "7", "offset": "2"},
                      headers={"Prefer": "count=exact"})
    assert rest.status_code == 200
    body = call("list_records", {"table_id": table["id"], "filters": {"Score": "gt.2"}, "order": "Score.desc",
                                 "limit": 7, "offset": 2, "count": True})
    for _ in range(2):  # the second call is served from the memoised statements
        r = httpx.post(base_url + MCP_PATH, content=_body(body),
                       headers={**JSON_HEADERS, "Authorization": f"Bearer {ws.builder_token}"})
        page = r.json()["result"]["structuredContent"]
        assert page["records"] == rest.json()["records"]
        assert page["total"] == int(rest.headers["X-Total-Count"]) == 21
        assert page["has_more"] is True and "offset=9" in page["hint"]
