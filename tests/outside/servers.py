"""Small local servers speaking the real protocols the pipelines call: an HTTP echo /
flaky / slow / redirecting server and an OpenAI-compatible chat-completions server
(JSON and server-sent-event streaming). Each runs aiohttp on its own thread and loop and
records what it received, so tests assert at the receiver.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bench.fakes import LocalServer, stream_chat


@dataclass
class Received:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)


class ServerThread(LocalServer):
    """An aiohttp application served on 127.0.0.1 from a background thread, recording calls."""

    def __init__(self, app: web.Application, port: int | None = None) -> None:
        super().__init__(app, port)
        self.calls: list[Received] = []
        self.in_flight = 0
        self.max_in_flight = 0

    def calls_to(self, path: str) -> list[Received]:
        return [c for c in self.calls if c.path == path]


def echo_server() -> ServerThread:
    """Routes:

    * ``/echo`` — any method; answers JSON ``{method, path, query, headers, body}``
      (everything it got, credentials included: the proxy must redact them)
    * ``/private`` — records headers but answers only ``{"ok": true}``
    * ``/flaky/{name}?fail=N&status=503`` — fails N times per name, then 200
    * ``/status/{code}`` — that status with a short text body
    * ``/slow?seconds=S`` — answers after S seconds
    * ``/redirect?to=URL&status=302`` — a redirect
    * ``/big?mb=N`` — N MB of JSON-ish bytes, streamed
    * ``/text`` — text/plain; ``/latency?ms=N`` — JSON after N ms (the benchmark)
    """
    server: ServerThread
    failures: Counter[str] = Counter()
    lock = threading.Lock()

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        body = await request.read()
        server.calls.append(Received(request.method, request.path, dict(request.query),
                                     dict(request.headers), body))
        server.in_flight += 1
        server.max_in_flight = max(server.max_in_flight, server.in_flight)
        try:
            return await handler(request)
        finally:
            server.in_flight -= 1

    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response({
            "method": request.method, "path": request.path, "query": dict(request.query),
            "headers": dict(request.headers), "body": body.decode(errors="replace"),
        })

    async def private(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def flaky(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        fail = int(request.query.get("fail", "1"))
        status = int(request.query.get("status", "503"))
        with lock:
            failures[name] += 1
            n = failures[name]
        if n <= fail:
            headers = {"Retry-After": request.query["retry_after"]} if "retry_after" in request.query else {}
            return web.Response(status=status, text=f"try again ({n})", headers=headers)
        return web.json_response({"ok": True, "attempt": n})

    async def status(request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["code"]), text="nope")

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(float(request.query.get("seconds", "5")))
        return web.json_response({"slow": True})

    async def redirect(request: web.Request) -> web.Response:
        return web.Response(status=int(request.query.get("status", "302")), headers={"Location": request.query["to"]})

    async def big(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        await resp.prepare(request)
        chunk = b"x" * 65536
        for _ in range(int(float(request.query.get("mb", "6")) * 16)):
            await resp.write(chunk)
        await resp.write_eof()
        return resp

    async def text(request: web.Request) -> web.Response:
        return web.Response(text="plain words")

    async def latency(request: web.Request) -> web.Response:
        await asyncio.sleep(float(request.query.get("ms", "5")) / 1000)
        return web.json_response({"ok": True, "n": request.query.get("n")})

    app = web.Application(middlewares=[record])
    app.router.add_route("*", "/echo", echo)
    app.router.add_route("*", "/private", private)
    app.router.add_route("*", "/flaky/{name}", flaky)
    app.router.add_route("*", "/status/{code}", status)
    app.router.add_get("/slow", slow)
    app.router.add_route("*", "/redirect", redirect)
    app.router.add_get("/big", big)
    app.router.add_get("/text", text)
    app.router.add_route("*", "/latency", latency)
    server = ServerThread(app)
    return server.start()


def chat_server() -> ServerThread:
    """An OpenAI-compatible ``POST /v1/chat/completions``.

    Replies ``echo: <last user message>``; with ``response_format: json_object`` it
    replies ``{"echo": <message>, "model": <model>}`` unless the message contains
    ``BROKEN``, then it replies text that is not JSON. ``stream: true`` answers SSE chunks
    (and a usage chunk when ``stream_options.include_usage``).
    """
    server: ServerThread
    bodies: dict[str, list[dict[str, Any]]] = defaultdict(list)

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        body = await request.read()
        server.calls.append(Received(request.method, request.path, dict(request.query),
                                     dict(request.headers), body))
        return await handler(request)

    async def completions(request: web.Request) -> web.StreamResponse:
        req = await request.json()
        bodies["completions"].append(req)
        user = [m["content"] for m in req["messages"] if m["role"] == "user"][-1]
        wants_json = (req.get("response_format") or {}).get("type") == "json_object"
        if wants_json:
            content = "this is not json" if "BROKEN" in user else json.dumps({"echo": user, "model": req["model"]})
        else:
            content = f"echo: {user}"
        usage = {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500}
        if not req.get("stream"):
            return web.json_response({
                "id": "chatcmpl-1", "object": "chat.completion", "model": req["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                             "finish_reason": "stop"}],
                "usage": usage,
            })
        include_usage = (req.get("stream_options") or {}).get("include_usage")
        return await stream_chat(request, [{"content": content[i:i + 4]} for i in range(0, len(content), 4)],
                                 usage=usage if include_usage else None, id="chatcmpl-1",
                                 object="chat.completion.chunk")

    app = web.Application(middlewares=[record])
    app.router.add_post("/v1/chat/completions", completions)
    server = ServerThread(app)
    server.bodies = bodies  # type: ignore[attr-defined]
    return server.start()
