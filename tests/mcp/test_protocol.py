"""The MCP door itself: handshake and version negotiation, tool lists per token type,
authentication (401 / 403 WRONG_PROTOCOL), argument validation and unknown tools."""

from __future__ import annotations

import json

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.mcp.conftest import MCP_PATH, data, error_code

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _initialize(version: str) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {},
                       "clientInfo": {"name": "raw-test", "version": "1"}}}


@pytest.mark.parametrize("asked,answered", [
    ("2025-06-18", "2025-06-18"),
    ("2025-03-26", "2025-03-26"),
    ("2025-11-25", "2025-11-25"),
    ("1999-01-01", "2025-11-25"),  # unknown: the server counter-offers its newest handshake revision
])
def test_initialize_negotiates_the_protocol_revision(ws, base_url, asked, answered):
    r = httpx.post(base_url + MCP_PATH, json=_initialize(asked),
                   headers={**HEADERS, "Authorization": f"Bearer {ws.builder_token}"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == 1
    assert body["result"]["protocolVersion"] == answered
    assert body["result"]["serverInfo"]["name"] == "workspace-data-service"
    assert "tools" in body["result"]["capabilities"]
    assert "mcp-session-id" not in r.headers  # stateless: any API process answers any request


def test_raw_json_rpc_tools_list_at_2025_06_18_is_plain_json(ws, base_url):
    r = httpx.post(base_url + MCP_PATH, json={"jsonrpc": "2.0", "id": 7, "method": "tools/list"},
                   headers={**HEADERS, "Authorization": f"Bearer {ws.builder_token}",
                            "MCP-Protocol-Version": "2025-06-18"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    tools = r.json()["result"]["tools"]
    assert len(tools) == 56
    assert all(t["inputSchema"]["type"] == "object" for t in tools)


async def test_official_client_negotiates_in_legacy_and_auto_modes(ws, mcp):
    async with mcp(ws.builder_token, mode="legacy") as c:
        assert c.protocol_version == "2025-11-25"
        assert data(await c.call_tool("list_tables", {})) == {"tables": []}
    async with mcp(ws.builder_token, mode="auto") as c:
        # the SDK's newest revision, reached by server/discover instead of initialize
        assert c.protocol_version == "2026-07-28"
        assert len((await c.list_tools()).tools) == 56
        assert data(await c.call_tool("list_tables", {})) == {"tables": []}


@pytest.mark.parametrize("token_type,count", [("user_mcp", 12), ("vibe_mcp", 56)])
async def test_tools_list_depends_on_the_token_type(ws, mcp, token_type, count):
    token = ws.builder_token if token_type == "vibe_mcp" else ws.token("user_mcp", profile_id=ws.profile([])["id"])["token"]
    async with mcp(token) as c:
        tools = (await c.list_tools()).tools
    assert len(tools) == count
    names = {t.name for t in tools}
    assert {"check_column_types", "list_tables", "list_columns", "list_records", "get_record", "create_record",
            "update_record", "delete_record", "compute_cell", "list_views", "semantic_search",
            "sql_query"} <= names
    for t in tools:
        assert t.description and t.annotations is not None and t.output_schema is not None
        assert t.annotations.read_only_hint is not None and t.annotations.destructive_hint is not None
        assert t.annotations.idempotent_hint is not None
        for name, prop in t.input_schema.get("properties", {}).items():
            assert prop.get("description") or prop.get("properties"), f"{t.name}.{name} is undocumented"


def test_get_tools_returns_the_tokens_live_list(ws, base_url):
    user = ws.token("user_mcp", profile_id=ws.profile([])["id"])["token"]
    for token, count in ((ws.builder_token, 56), (user, 12)):
        r = httpx.get(f"{base_url}{MCP_PATH}/tools", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["count"] == count == len(body["tools"])
        list_records = next(t for t in body["tools"] if t["name"] == "list_records")
        assert list_records["annotations"]["readOnlyHint"] is True
        assert set(list_records["inputSchema"]["properties"]) == {"table_id", "filters", "order", "limit",
                                                                   "offset", "after", "select", "expand", "view", "count"}
    delete = next(t for t in httpx.get(f"{base_url}{MCP_PATH}/tools",
                                       headers={"Authorization": f"Bearer {ws.builder_token}"}).json()["tools"]
                  if t["name"] == "delete_table")
    assert delete["annotations"]["destructiveHint"] is True


@pytest.mark.parametrize("method", ["post", "get_tools"])
def test_rest_api_token_is_refused_with_wrong_protocol(ws, base_url, method):
    token = ws.token("rest_api", profile_id=ws.profile([])["id"])["token"]
    auth = {"Authorization": f"Bearer {token}"}
    if method == "post":
        r = httpx.post(base_url + MCP_PATH, json=_initialize("2025-06-18"), headers={**HEADERS, **auth})
    else:
        r = httpx.get(f"{base_url}{MCP_PATH}/tools", headers=auth)
    assert r.status_code == 403
    assert r.json()["code"] == "WRONG_PROTOCOL" and r.json()["error"]


@pytest.mark.parametrize("auth", [None, "Bearer nope", "Basic abc", "Bearer " + "x" * 600])
def test_missing_or_bad_token_is_401(base_url, auth):
    headers = dict(HEADERS)
    if auth:
        headers["Authorization"] = auth
    r = httpx.post(base_url + MCP_PATH, json=_initialize("2025-06-18"), headers=headers)
    assert r.status_code == 401
    assert r.json()["code"] == "UNAUTHORIZED"
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert httpx.get(f"{base_url}{MCP_PATH}/tools", headers=headers).json()["code"] == "UNAUTHORIZED"


def test_revoked_token_is_401(ws, admin, base_url):
    tok = ws.token("user_mcp", profile_id=ws.profile([])["id"])
    auth = {**HEADERS, "Authorization": f"Bearer {tok['token']}"}
    assert httpx.post(base_url + MCP_PATH, json=_initialize("2025-06-18"), headers=auth).status_code == 200
    assert admin.delete(f"/workspaces/{ws.id}/tokens/{tok['id']}").status_code in (200, 204)
    r = httpx.post(base_url + MCP_PATH, json=_initialize("2025-06-18"), headers=auth)
    assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED"


async def test_user_token_cannot_call_builder_tools(ws, mcp):
    token = ws.token("user_mcp", profile_id=ws.profile([])["id"])["token"]
    async with mcp(token) as c:
        with pytest.raises(MCPError) as exc:
            await c.call_tool("create_table", {"name": "x"})
    assert "unknown tool" in exc.value.message


async def test_unknown_tool_is_a_protocol_error(ws, mcp):
    async with mcp(ws.builder_token) as c:
        with pytest.raises(MCPError):
            await c.call_tool("no_such_tool", {})


@pytest.mark.parametrize("tool,args", [
    ("list_columns", {}),                                   # missing required argument
    ("list_records", {"table_id": 1, "count": "yes"}),      # wrong type (limit and offset: the query parser's)
    ("sql_query", {"query": 5}),
])
async def test_bad_arguments_are_tool_errors(ws, mcp, tool, args):
    async with mcp(ws.builder_token) as c:
        assert error_code(await c.call_tool(tool, args)) == "VALIDATION_ERROR"


@pytest.mark.parametrize("tool,args,name", [
    ("list_records", {"table_id": 1, "bogus": True}, "bogus"),
    ("list_records", {"table_id": 1, "run_pipeline": False}, "run_pipeline"),  # REST: UNKNOWN_PARAMETER too
    ("get_record", {"table_id": 1, "record_id": 1, "view": "x"}, "view"),
    ("get_record", {"record_id": 1, "limit": 1}, "limit"),  # before the other schema checks
    ("list_tables", {"x": 1}, "x"),
    ("get_table", {"table_id": 1, "Name": "x"}, "Name"),  # a builder tool
    ("create_view", {"table_id": 1, "name": "v", "view_type": "grid", "filters": {}}, "filters"),
])
async def test_unknown_arguments_are_unknown_parameter_as_on_rest(ws, mcp, tool, args, name):
    async with mcp(ws.builder_token) as c:
        res = await c.call_tool(tool, args)
        assert error_code(res) == "UNKNOWN_PARAMETER"
        assert repr(name) in res.structured_content["error"]


async def test_an_unknown_key_inside_an_argument_stays_a_validation_error(ws, mcp):
    async with mcp(ws.builder_token) as c:
        res = await c.call_tool("create_table", {"name": "X", "columns": [{"name": "a", "type": "text", "bogus": 1}]})
        assert error_code(res) == "VALIDATION_ERROR"


def test_docs_list_exactly_the_55_tools_with_their_doors():
    import re
    from pathlib import Path

    from api.doors.mcp import catalog

    doc = (Path(__file__).resolve().parents[2] / "docs" / "mcp.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| (data|builder) \|", doc, flags=re.MULTILINE))
    assert rows == {t.name: t.door for t in catalog.ALL_TOOLS}


def test_argument_validation_memo_keeps_only_valid_arguments():
    """Arguments found valid are remembered (as tool name + JSON); invalid ones are checked
    every time, and the same JSON under another tool is validated against that tool."""
    from api.doors.mcp import catalog
    from storage.errors import ServiceError, ValidationError

    spec = catalog.BY_NAME["list_records"]
    good = {"table_id": 7, "filters": {"Score": "gt.1"}, "limit": 5}
    catalog._VALID.clear()
    assert catalog.validate_arguments(spec, good) is good
    assert spec.name.encode() + b"\0" + json.dumps(good, separators=(",", ":")).encode() in catalog._VALID
    assert catalog.validate_arguments(spec, dict(good)) == good  # from the memo
    for bad in ({"table_id": 7, "order": 5}, {"table_id": 7, "count": "yes"}, {"limit": 5}):
        for _ in range(2):
            with pytest.raises(ValidationError):
                catalog.validate_arguments(spec, bad)
    with pytest.raises(ServiceError) as exc:  # valid for list_records, not for get_record
        catalog.validate_arguments(catalog.BY_NAME["get_record"], good)
    assert exc.value.code == "UNKNOWN_PARAMETER"  # get_record takes no filters
    with pytest.raises(ValidationError):  # get_record needs record_id
        catalog.validate_arguments(catalog.BY_NAME["get_record"], {"table_id": 7})
    huge = {"table_id": 2**70}  # beyond orjson: validated without the memo
    catalog.validate_arguments(spec, huge)
    assert len(catalog._VALID) == 1


def test_get_opens_no_stream_that_never_ends(ws, base_url):
    """Stateless: the SDK answered GET with an event stream it never wrote to nor closed,
    outside every limit. The transport lets a server answer 405 instead."""
    r = httpx.get(f"{base_url}{MCP_PATH}", timeout=10,
                  headers={"Authorization": f"Bearer {ws.builder_token}", "Accept": "text/event-stream"})
    assert r.status_code == 405 and r.json()["code"] == "METHOD_NOT_ALLOWED", r.text
    assert "POST" in r.headers["allow"]
    r = httpx.get(f"{base_url}{MCP_PATH}", timeout=10, headers={"Accept": "text/event-stream"})
    assert r.status_code == 401  # a token first, as on every call
