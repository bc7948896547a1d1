"""The stand-ins for services outside the project, shared by the bench and the tests:
small local servers speaking the third party's real wire format (an OpenAI-compatible
provider, the Telegram Bot API, HTTP receivers), never a patch of our own code.

* :class:`LocalServer` serves an aiohttp application on 127.0.0.1, either on a thread
  with its own event loop (``start()`` / ``stop()``: for synchronous test code) or in the
  running loop (``async with``: for the bench, whose load runs in that loop).
* :func:`stream_chat` answers an OpenAI-compatible ``POST /chat/completions`` with
  ``stream: true`` as the providers do: one server-sent event per delta, a usage chunk,
  ``data: [DONE]``.
* :func:`bag_of_words` is a deterministic embedding for a fake ``POST /embeddings``:
  texts sharing words are close, so ranking is meaningful and costs almost nothing.

This module is part of the shipped ``bench`` package, so both ``wds bench`` and the test
suite (which is not shipped) can import it.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any, Self

import orjson
from aiohttp import web

from wds.runtime import free_port

DIM = 384
WORD_RE = re.compile(r"[a-z0-9]+")


class LocalServer:
    """An aiohttp application served on ``127.0.0.1:port`` (see the module docstring)."""

    def __init__(self, app: web.Application, port: int | None = None) -> None:
        self.app = app
        self.port = port or free_port()
        self.runner: web.AppRunner | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _up(self) -> None:
        self.runner = web.AppRunner(self.app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def _down(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    # ------------------------------------------------------------------ in the running loop
    async def __aenter__(self) -> Self:
        await self._up()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._down()

    # ------------------------------------------------------------------ on a thread
    def start(self) -> Self:
        """Serve from a background thread with its own loop; returns once it listens.

        Raises:
            RuntimeError: it did not listen within 10 s.
        """
        loop = self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self._up())
            ready.set()
            loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        if not ready.wait(10):
            raise RuntimeError(f"the local server on port {self.port} did not start")
        return self

    def stop(self) -> None:
        if self.loop is None or self.thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._down(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop = self.thread = None


def sse_event(payload: Any) -> bytes:
    """One server-sent event carrying JSON."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


async def stream_chat(
    request: web.Request, deltas: Iterable[dict[str, Any]], *, usage: dict[str, Any] | None = None,
    pause_s: float = 0.0, first_sent: Callable[[], None] | None = None, **chunk_fields: Any,
) -> web.StreamResponse:
    """Answer a streamed chat completion: ``data: {..., "choices": [{"index": 0, "delta": d}]}``
    per delta (``pause_s`` apart; ``first_sent`` called once the first is written), then
    ``data: {"choices": [], "usage": usage}`` when ``usage`` is given, then ``data: [DONE]``.
    ``chunk_fields`` (``id``, ``object``, …) go into every delta chunk.

    Raises:
        ConnectionError: the client went away mid-stream (as aiohttp raises it).
    """
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    for i, delta in enumerate(deltas):
        if i and pause_s:
            await asyncio.sleep(pause_s)
        await resp.write(sse_event({**chunk_fields, "choices": [{"index": 0, "delta": delta}]}))
        if i == 0 and first_sent is not None:
            first_sent()
    if usage is not None:
        await resp.write(sse_event({"choices": [], "usage": usage}))
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


def bag_of_words(text: str) -> list[float]:
    """Word counts hashed into :data:`DIM` dimensions, unit length (deterministic).

    >>> v = bag_of_words("red fox red")
    >>> len(v), round(sum(x * x for x in v), 6)
    (384, 1.0)
    >>> bag_of_words("") == [0.0] * 384
    True
    """
    vec = [0.0] * DIM
    for word in WORD_RE.findall(text.lower()):
        vec[int(hashlib.md5(word.encode()).hexdigest(), 16) % DIM] += 1.0
    norm = math.sqrt(sum(x * x for x in vec))
    return [x / norm for x in vec] if norm else vec


def embeddings_response(body: dict[str, Any]) -> web.Response:
    """An OpenAI-compatible ``/embeddings`` answer for a request body, by :func:`bag_of_words`."""
    inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
    data = [{"object": "embedding", "index": i, "embedding": bag_of_words(t)} for i, t in enumerate(inputs)]
    return web.Response(body=orjson.dumps({"object": "list", "data": data, "model": body.get("model"),
                                           "usage": {"prompt_tokens": 1, "total_tokens": 1}}),
                        content_type="application/json")
