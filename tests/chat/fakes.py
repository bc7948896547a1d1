"""Local stand-ins for the services outside the project, speaking their real wire formats.

* An OpenAI-compatible AI provider (aiohttp, on its own thread and loop):
  ``POST /chat/completions`` with ``stream: true`` answers server-sent events
  ``data: {"choices": [{"delta": {"content" | "tool_calls"}}]}`` and ``data: [DONE]``
  (tool-call arguments arrive in fragments, as real providers send them); ``POST
  /embeddings`` answers deterministic bag-of-words vectors (each word hashed into one of
  384 dimensions), so texts sharing words are close and ranking is meaningful.
* The Telegram Bot API's ``POST /bot<token>/sendMessage`` on the same server.

What the model "does" is scripted by the last message it is sent:

* a ``tool`` message last → it answers ``RESULT <tool> <ok> <summary of the data>``;
* ``CALL <tool> <json arguments>`` → it calls that tool (several ``CALL`` lines: several
  calls in one round); ``LOOP`` → it calls ``list_tables`` forever;
* ``SLOW <n>`` → ``n`` tokens 40 ms apart (for disconnects); ``FAIL`` → HTTP 500;
* ``JUNK <kind>`` → HTTP 200 with something that is not a chat completion (:data:`JUNK`):
  a JSON object without choices, empty choices, a text/plain body, or a stream of events
  that are not completion chunks; ``PLAIN <text>`` → ``<text>`` as one completion that is
  not streamed (``stream: true`` ignored, as some providers do);
* anything else → ``You said: <message> (history <n>)`` word by word, where ``n``
  counts the earlier user/assistant messages it was given.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bench.fakes import LocalServer, embeddings_response, stream_chat
from wds.runtime import free_port


@dataclass
class FakeServices:
    port: int = field(default_factory=free_port)
    completions: list[dict[str, Any]] = field(default_factory=list)
    embeddings: list[dict[str, Any]] = field(default_factory=list)
    telegram: list[dict[str, Any]] = field(default_factory=list)
    webhooks: list[dict[str, Any]] = field(default_factory=list)  # setWebhook calls: {token, url, secret_token}
    streams_finished: int = 0
    streams_aborted: int = 0
    first_chunk_s: list[float] = field(default_factory=list)  # provider's own time to first token
    embeddings_down: int = 0  # the next this many /embeddings calls answer 503, as a provider outage does
    embeddings_refused: int = 0  # how many were answered 503

    def __post_init__(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/chat/completions", self._chat)
        app.router.add_post("/embeddings", self._embeddings)
        app.router.add_post(r"/bot{token}/sendMessage", self._send_message)
        app.router.add_post(r"/bot{token}/setWebhook", self._set_webhook)
        self.server = LocalServer(app, self.port)

    @property
    def url(self) -> str:
        return self.server.url

    # ------------------------------------------------------------------ life cycle
    def start(self) -> FakeServices:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    # ------------------------------------------------------------------ chat
    async def _chat(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        body = await request.json()
        self.completions.append(body)
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        content = str(last.get("content") or "")
        if content.startswith("JUNK "):
            return await JUNK[content.removeprefix("JUNK ")](request)
        if content.startswith("PLAIN "):  # a provider that ignores stream: true
            return web.json_response({"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": content.removeprefix("PLAIN ")}}],
                                      "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})
        chunks, delay = self._script(messages, last)
        if chunks is None:
            return web.json_response({"error": {"message": "boom"}}, status=500)
        usage = {"prompt_tokens": 10, "completion_tokens": len(chunks), "total_tokens": 10 + len(chunks)}
        try:
            resp = await stream_chat(request, chunks, usage=usage, pause_s=delay,
                                     first_sent=lambda: self.first_chunk_s.append(time.perf_counter() - started))
        except (ConnectionResetError, ConnectionError, asyncio.CancelledError):
            self.streams_aborted += 1
            raise
        self.streams_finished += 1
        return resp

    def _script(self, messages: list[dict[str, Any]], last: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, float]:
        last_user = next((m for m in reversed(messages) if m.get("role") == "user"), {})
        if str(last_user.get("content") or "").startswith("LOOP"):
            return _tool_chunks([("list_tables", "{}")], first_id=len(messages)), 0.0
        if last.get("role") == "tool":
            wrapped = json.loads(last["content"])
            data = wrapped.get("data")
            summary = json.dumps(data, sort_keys=True)[:400] if data is not None else wrapped.get("data_prefix", "")[:400]
            text = f"RESULT {wrapped['tool']} {str(wrapped['ok']).lower()} {summary}"
            return [{"role": "assistant", "content": ""}] + [{"content": p} for p in _pieces(text)], 0.0
        content = str(last.get("content") or "")
        if content.startswith("FAIL"):
            return None, 0.0
        if content.startswith("SLOW"):
            n = int(content.split()[1]) if len(content.split()) > 1 else 100
            return [{"content": f"t{i} "} for i in range(n)], 0.04
        if content.startswith("CALL "):
            calls = []
            for line in content.splitlines():
                if line.startswith("CALL "):
                    _, name, *rest = line.split(" ", 2)
                    calls.append((name, rest[0] if rest else "{}"))
            return _tool_chunks(calls, first_id=len(messages)), 0.0
        earlier = sum(1 for m in messages[1:-1] if m.get("role") in ("user", "assistant"))
        text = f"You said: {content} (history {earlier})"
        return [{"role": "assistant", "content": ""}] + [{"content": p} for p in _pieces(text)], 0.0

    # ------------------------------------------------------------------ embeddings
    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        if self.embeddings_down > 0:
            self.embeddings_down -= 1
            self.embeddings_refused += 1
            return web.json_response({"error": {"message": "overloaded", "type": "server_error"}}, status=503)
        self.embeddings.append(body)
        return embeddings_response(body)

    # ------------------------------------------------------------------ telegram
    async def _send_message(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.telegram.append({"token": request.match_info["token"], **body})
        return web.json_response({"ok": True, "result": {"message_id": len(self.telegram),
                                                         "chat": {"id": body.get("chat_id")}, "text": body.get("text")}})


    async def _set_webhook(self, request: web.Request) -> web.Response:
        # as the Bot API: a token it does not know is 401 {"ok": false}
        token = request.match_info["token"]
        if "revoked" in token:
            return web.json_response({"ok": False, "error_code": 401, "description": "Unauthorized"}, status=401)
        self.webhooks.append({"token": token, **(await request.json())})
        return web.json_response({"ok": True, "result": True, "description": "Webhook was set"})

    def webhook_secret(self, channel_token: str) -> str:
        """The secret_token last registered for the webhook of a channel (by its token in the URL)."""
        return [w for w in self.webhooks if w["url"].endswith(f"token={channel_token}")][-1]["secret_token"]


async def _junk_stream(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b'data: {"foo": 1}\n\ndata: {"choices": []}\n\ndata: [DONE]\n\n')
    await resp.write_eof()
    return resp


async def _junk_object(request: web.Request) -> web.Response:
    return web.json_response({"foo": 1})


async def _junk_no_choices(request: web.Request) -> web.Response:
    return web.json_response({"choices": []})


async def _junk_text(request: web.Request) -> web.Response:
    return web.Response(text="Service temporarily in maintenance", content_type="text/plain")


# HTTP 200 answers that are not chat completions, by the message ``JUNK <kind>``
JUNK: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
    "object": _junk_object, "no-choices": _junk_no_choices, "text": _junk_text, "stream": _junk_stream,
}


def _pieces(text: str) -> list[str]:
    words = text.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]


def _tool_chunks(calls: list[tuple[str, str]], first_id: int) -> list[dict[str, Any]]:
    """Tool calls as a real provider streams them: name first, arguments in fragments."""
    chunks: list[dict[str, Any]] = [{"role": "assistant", "content": None}]
    for index, (name, args) in enumerate(calls):
        chunks.append({"tool_calls": [{"index": index, "id": f"call_{first_id}_{index}", "type": "function",
                                       "function": {"name": name, "arguments": ""}}]})
        third = max(1, len(args) // 3)
        for start in range(0, len(args), third):
            chunks.append({"tool_calls": [{"index": index, "function": {"arguments": args[start:start + third]}}]})
    return chunks
