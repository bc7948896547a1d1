"""The process's HTTP client for AI providers: the agent chat's completions
(:mod:`api.doors.chat.provider`) and the embeddings of semantic search (:mod:`api.ops.search`).

The provider is operator configuration, so it is called on a plain shared client, not
through the SSRF guard of user-defined HTTP steps.
"""

from __future__ import annotations

import httpx

from api.state import AppState

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 120.0  # between two chunks of a stream, not for the whole answer


def http_client(state: AppState) -> httpx.AsyncClient:
    """The process's client for AI providers (chat and embeddings), made on first use."""
    client: httpx.AsyncClient | None = state.extras.get("ai_http")
    if client is None or client.is_closed:
        client = httpx.AsyncClient(timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
                                   limits=httpx.Limits(max_connections=100, max_keepalive_connections=20))
        state.extras["ai_http"] = client
    return client
