"""MCP's list_records refuses a page past 16 MiB as REST does (tests/api/test_page_cap.py)."""

from __future__ import annotations

from tests.api.test_page_cap import _fill, _text
from tests.mcp.conftest import data, error_code


async def test_mcp_list_records_answers_the_same(ws, mcp):
    t = ws.create_table("McpBig", [{"name": "Body", "type": "text"}])
    _fill(ws, t["id"], [{"fields": {"Body": _text()}} for _ in range(18)])
    async with mcp(ws.builder_token) as c:
        result = await c.call_tool("list_records", {"table_id": t["id"], "limit": 100})
        assert error_code(result) == "RESULT_TOO_LARGE"
        assert "limit=16" in result.content[0].text  # type: ignore[union-attr]
        page = data(await c.call_tool("list_records", {"table_id": t["id"], "limit": 16}))
        assert len(page["records"]) == 16 and page["has_more"] is True
