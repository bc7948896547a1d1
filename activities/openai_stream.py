"""The one reader of OpenAI-compatible streamed chat completions (server-sent events).

``POST {base_url}/chat/completions`` with ``stream: true``: the provider answers
server-sent events ``data: {"choices": [{"delta": {...}}]}`` and a final ``data: [DONE]``.
A delta carries ``content`` text, or ``tool_calls`` fragments — ``{index, id?, function:
{name?, arguments?}}`` whose ``arguments`` arrive in pieces to concatenate per ``index``.
:func:`stream_completion` turns that into :class:`Text` events as they arrive, then one
:class:`Finished` with the assembled tool calls and the token usage.

An answer that is not a completion is a :class:`ProviderError`, never an empty reply: a
stream none of whose chunks has a choice (``{"foo": 1}``, only ``{"choices": []}``), or a
body that is not a stream. A body that is not a stream is read as a non-streamed completion
by :func:`reply_of`, the ``ai_agent`` step's reader (a provider that ignores ``stream: true``
still answers); anything else it refuses is the error, with its reason.

Used by the agent chat (``api/doors/chat``) and by anything in ``activities`` that streams; the
provider is operator configuration, so it is called on a plain client, not through the
SSRF guard of user-defined HTTP steps. No I/O at import: the API may import it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from storage import jsontext
from storage.errors import ServiceError, Unavailable

NOT_A_COMPLETION = "the AI provider answered something that is not a chat completion"
NO_CHOICES = "the AI provider's response has no choices"


class ProviderError(Unavailable):
    """The AI provider failed or answered something that is not a chat completion (503)."""

    code = "AI_PROVIDER_ERROR"


class NotACompletion(ValueError):
    """What :func:`reply_of` raises: the payload is not a chat completion (the reason; the
    ai_agent step catches it as a ``ValueError``)."""


@dataclass
class ChatReply:
    content: str
    tokens: int = 0


def reply_of(payload: Any) -> ChatReply:
    """The assistant message and token count of a (non-streaming) completion response.

    >>> reply_of({"choices": [{"message": {"content": "hi"}}], "usage": {"total_tokens": 7}})
    ChatReply(content='hi', tokens=7)

    Raises:
        NotACompletion: the response is not a chat completion (a ``ValueError``).
    """
    if not isinstance(payload, dict) or not payload.get("choices") or not isinstance(payload["choices"], list):
        raise NotACompletion(NO_CHOICES)
    first = payload["choices"][0]
    message = (first.get("message") if isinstance(first, dict) else None) or {}
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str):
        raise NotACompletion("the AI provider's response has no message content")
    usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
    tokens = usage.get("total_tokens") or (usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0))
    return ChatReply(content=content, tokens=int(tokens or 0))


def _unstreamed(body: bytes, content_type: str) -> ChatReply:
    """A body that is not a stream, read as a non-streamed completion.

    Raises:
        ProviderError: it is not one (the reason and the body's start in the message).
    """
    try:
        return reply_of(orjson.loads(body))
    except orjson.JSONDecodeError:
        reason = f"a {content_type or 'untyped'} body that is not JSON"
    except NotACompletion as exc:
        reason = str(exc)
    detail = body[:200].decode("utf-8", "replace")
    raise ProviderError(f"{NOT_A_COMPLETION} ({reason}): {detail}")


@dataclass(frozen=True)
class Text:
    content: str


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text as the model wrote it (may be invalid: the tool says so)


@dataclass
class Finished:
    tool_calls: list[ToolCall] = field(default_factory=list)
    tokens: int = 0
    finish_reason: str | None = None


class _Calls:
    """Tool-call fragments assembled per ``index``."""

    def __init__(self) -> None:
        self.parts: dict[int, dict[str, Any]] = {}

    def add(self, fragment: dict[str, Any]) -> None:
        index = int(fragment.get("index", len(self.parts)))
        slot = self.parts.setdefault(index, {"id": "", "name": "", "arguments": []})
        if fragment.get("id"):
            slot["id"] = str(fragment["id"])
        fn = fragment.get("function") or {}
        if fn.get("name"):
            slot["name"] += str(fn["name"])
        if fn.get("arguments"):
            slot["arguments"].append(str(fn["arguments"]))

    def done(self) -> list[ToolCall]:
        return [ToolCall(id=s["id"] or f"call_{i}", name=s["name"], arguments="".join(s["arguments"]))
                for i, s in sorted(self.parts.items()) if s["name"]]


async def stream_completion(
    client: httpx.AsyncClient, base_url: str, api_key: str | None, body: dict[str, Any]
) -> AsyncIterator[Text | Finished]:
    """Stream one chat completion; yields :class:`Text` deltas, then one :class:`Finished`.

    Closing the iterator (a client disconnect cancels the task) closes the upstream
    response, which stops the provider's generation.

    Raises:
        ProviderError: transport failure, non-2xx status, or a malformed stream.
    """
    headers = {"Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    calls = _Calls()
    finished = Finished()
    chosen = False  # a chunk with a choice arrived: the stream is a completion
    try:
        async with client.stream("POST", f"{base_url.rstrip('/')}/chat/completions", headers=headers,
                                 content=jsontext.dumps({**body, "stream": True}),
                                 ) as resp:
            if resp.status_code >= 300:
                detail = (await resp.aread())[:300].decode("utf-8", "replace")
                raise ProviderError(f"the AI provider answered HTTP {resp.status_code}: {detail}")
            content_type = resp.headers.get("content-type", "").split(";")[0].strip().lower()
            if content_type != "text/event-stream":
                reply = _unstreamed(await resp.aread(), content_type)
                if reply.content:
                    yield Text(reply.content)
                yield Finished(tokens=reply.tokens, finish_reason="stop")
                return
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                if not data:
                    continue
                try:
                    chunk = orjson.loads(data)
                except orjson.JSONDecodeError:
                    raise ProviderError("the AI provider sent a malformed stream chunk") from None
                if isinstance(chunk, dict) and chunk.get("error"):
                    raise ProviderError(f"the AI provider reported an error: {str(chunk['error'])[:300]}")
                choices = chunk.get("choices") if isinstance(chunk, dict) else None
                for choice in choices if isinstance(choices, list) else []:
                    if not isinstance(choice, dict):
                        continue
                    chosen = True
                    delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
                    if delta.get("content"):
                        yield Text(str(delta["content"]))
                    for fragment in delta.get("tool_calls") or []:
                        if isinstance(fragment, dict):
                            calls.add(fragment)
                    if choice.get("finish_reason"):
                        finished.finish_reason = str(choice["finish_reason"])
                usage = chunk.get("usage") if isinstance(chunk, dict) else None
                if isinstance(usage, dict):
                    finished.tokens = int(usage.get("total_tokens") or 0) or finished.tokens
    except httpx.HTTPError as exc:
        raise ProviderError(f"the AI provider is not reachable ({type(exc).__name__})") from exc
    except ServiceError:
        raise
    if not chosen:  # {"foo": 1}, only {"choices": []}, nothing at all: never an empty reply
        raise ProviderError(f"{NOT_A_COMPLETION} ({NO_CHOICES})")
    finished.tool_calls = calls.done()
    yield finished
