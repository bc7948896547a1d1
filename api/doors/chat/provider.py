"""The agent chat's AI provider: its shared HTTP client (:mod:`api.services.aiclient`) and configuration check.

Completions stream through the one OpenAI-compatible stream reader,
:func:`activities.openai_stream.stream_completion` (``POST {WDS_AI_BASE_URL}/chat/completions``
with ``stream: true``: :class:`Text` events as they arrive, then one :class:`Finished` with
the assembled tool calls and the token usage); its names are re-exported here.

The provider is operator configuration (like the ai_agent column step), so it is called
on a plain shared client, not through the SSRF guard of user-defined HTTP steps.
"""

from __future__ import annotations

from activities.openai_stream import Finished, ProviderError, Text, ToolCall, stream_completion
from api.services.aiclient import http_client
from api.state import AppState
from storage.errors import Unavailable

__all__ = ["Finished", "ProviderError", "Text", "ToolCall", "http_client", "require_provider", "stream_completion"]

NO_PROVIDER = ("no AI provider is configured on this server: the operator sets WDS_AI_BASE_URL"
               " (and WDS_AI_API_KEY, WDS_AI_MODEL) to an OpenAI-compatible endpoint")


def require_provider(state: AppState) -> str:
    """The provider's base URL.

    Raises:
        Unavailable: 503 ``UNAVAILABLE`` with a clear message when none is configured.
    """
    base = (state.settings.ai_base_url or "").strip().rstrip("/")
    if not base:
        raise Unavailable(NO_PROVIDER)
    return base
