"""MCP test helpers: the official SDK client (Streamable HTTP) against the running API."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

MCP_PATH = "/functions/v1/mcp-server"


@asynccontextmanager
async def connect(base_url: str, token: str, *, mode: str = "legacy") -> AsyncIterator[Client]:
    """An initialized official MCP client for ``token`` (``mode``: legacy handshake or auto)."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        transport = streamable_http_client(base_url + MCP_PATH, http_client=http)
        async with Client(transport, mode=mode, read_timeout_seconds=60) as client:  # type: ignore[arg-type]
            yield client


def data(result: CallToolResult) -> dict[str, Any]:
    """A successful tool result's structured content (asserting it matches the text)."""
    assert not result.is_error, result.structured_content
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
    return result.structured_content  # type: ignore[no-any-return]


def error_code(result: CallToolResult) -> str:
    """A failed tool result's error code (tool errors are results, never protocol errors)."""
    assert result.is_error, result.structured_content
    body = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert set(body) >= {"error", "code"}
    return str(body["code"])


@pytest.fixture
def mcp(base_url: str) -> Callable[..., Any]:
    """``async with mcp(token) as client`` — the official client on the test server."""

    def make(token: str, *, mode: str = "legacy") -> Any:
        return connect(base_url, token, mode=mode)

    return make


def call_tool_sync(base_url: str, token: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """One tool call from a synchronous test (its own event loop); returns the result data."""

    async def go() -> dict[str, Any]:
        async with connect(base_url, token) as client:
            return data(await client.call_tool(tool, args))

    return asyncio.run(go())
