"""MCP (issue 7): the ``list_records`` tool beside the same query through REST.

One raw JSON-RPC ``tools/call`` POST per operation to ``/functions/v1/mcp-server``
(stateless Streamable HTTP: no session, plain JSON answer at protocol 2025-06-18), with
the read table's filter ``Score > 500 AND Status = a``, ``order id.asc``, ``limit 100``.
Interleaved with ``GET {rest}/tables/{id}/records`` with the same query (the issue's
target): neither counts; the tool also reads one record past the page, for its
``has_more``. A second pair compares the tool with ``count: true`` against
REST with ``Prefer: count=exact``: both also return the exact total.
"""

from __future__ import annotations

import json
from typing import Any

from bench.context import BenchContext, BenchError, latency_figure
from bench.load import Operation, OperationFailed
from bench.report import Figure
from bench.scenarios.registry import scenario

MCP_PATH = "/functions/v1/mcp-server"
MAX_RATIO = 1.5
PAGE = 100
REST_QUERY = f"Score=gt.500&Status=eq.a&order=id.asc&limit={PAGE}&offset=0"


def tools_call(table_id: int, *, count: bool = False) -> dict[str, Any]:
    """The JSON-RPC body of the measured ``list_records`` call (``count`` adds the total)."""
    extra = {"count": True} if count else {}
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "list_records",
        "arguments": {"table_id": table_id, "filters": {"Score": "gt.500", "Status": "eq.a"},
                      "order": "id.asc", "limit": PAGE, "offset": 0, **extra}}}


def tool_records(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The records of a ``tools/call`` answer.

    Raises:
        BenchError: a protocol error or a tool error.
    """
    if "error" in body:
        raise BenchError(f"MCP error: {body['error']}")
    result = body["result"]
    if result.get("isError"):
        raise BenchError(f"list_records failed: {result.get('structuredContent')}")
    return list(result["structuredContent"]["records"])


def _get(ctx: BenchContext, url: str, headers: dict[str, str]) -> Operation:
    session = ctx.session

    async def op() -> None:
        async with session.get(url, headers=headers) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise OperationFailed(f"HTTP {resp.status}: {body[:200]!r}")

    return op


@scenario("mcp.list_records", title="MCP list_records vs the same query through REST",
          target=f"p50 ≤ {MAX_RATIO:g}× REST p50")
async def mcp_list_records(ctx: BenchContext) -> list[Figure]:
    table = await ctx.seeded_table()
    session = ctx.session
    mcp_url = ctx.deployment.base_url + MCP_PATH
    mcp_headers = {**ctx.headers, "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": "2025-06-18"}
    payload = json.dumps(tools_call(table.id)).encode()
    counted_payload = json.dumps(tools_call(table.id, count=True)).encode()
    rest_url = f"{ctx.rest}/tables/{table.id}/records?{REST_QUERY}"
    auth = {"Authorization": ctx.headers["Authorization"]}

    rest = await ctx.call("GET", rest_url, expect=(200,))
    for body in (payload, counted_payload):
        async with session.post(mcp_url, data=body, headers=mcp_headers) as resp:
            if resp.status != 200:
                raise BenchError(f"MCP answered {resp.status}: {(await resp.read())[:300]!r}")
            page = json.loads(await resp.read())
        if [r["id"] for r in tool_records(page)] != [r["id"] for r in rest["records"]]:
            raise BenchError("MCP and REST return different pages")
        content = page["result"]["structuredContent"]
        if not content["has_more"]:
            raise BenchError("the measured query should match more records than one page")
        if ("total" in content) != (body is counted_payload):
            raise BenchError("list_records should give a total exactly when count is true")

    def mcp_op(body: bytes) -> Operation:
        async def op() -> None:
            async with session.post(mcp_url, data=body, headers=mcp_headers) as resp:
                answer = await resp.read()
                # a tool error is a 200 too: the flag is in the body
                if resp.status != 200 or b'"isError":true' in answer:
                    raise OperationFailed(f"HTTP {resp.status}: {answer[:200]!r}")

        return op

    rest_op = _get(ctx, rest_url, auth)
    count_op = _get(ctx, rest_url, {**auth, "Prefer": "count=exact"})
    mcp, plain, mcp_counted, counted = await ctx.interleave(
        [mcp_op(payload), rest_op, mcp_op(counted_payload), count_op], 1)
    name = f"MCP list_records, filtered, {PAGE} rows, sequential"
    return [
        latency_figure("mcp.list_records", f"{name} vs REST", mcp, plain, max_ratio=MAX_RATIO,
                       baseline_label="REST", tags=ctx.tags,
                       note="neither counts; the tool reads one record past the page for has_more"),
        latency_figure("mcp.list_records", f"{name}, count: true vs REST + count=exact", mcp_counted, counted,
                       baseline_label="REST+count", tags=ctx.tags,
                       note="both also return the exact total of matching records"),
    ]
