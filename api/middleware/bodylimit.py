"""Refuse request bodies over the limit while they stream, before auth or any parsing.

The outermost body-reading layer (see the ASGI order in :mod:`api.app`): every layer and
route inside it (the text guard, idempotency, the REST and MCP fast paths, FastAPI's
body parsing, object uploads) reads through the ``receive`` this layer hands on, so none
of them can buffer more than the limit:

* a ``Content-Length`` over the limit is answered 413 ``PAYLOAD_TOO_LARGE`` at once,
  without reading a byte of the body (nor resolving the token: an unauthenticated client
  learns nothing but the limit);
* a chunked body (or one longer than its ``Content-Length``) is counted as it arrives;
  the chunk that crosses the limit makes ``receive`` raise :class:`PayloadTooLarge`, and
  whatever the app does with that, the client gets the 413 (if the response has not
  started yet) and the connection is closed: the rest of the body is never read.

Limits: ``WDS_MAX_BODY_BYTES`` (10 MiB) for every request but object uploads
(``POST``/``PUT /storage/v1/object/{bucket}/{path}``), which take up to
``WDS_STORAGE_MAX_OBJECT_BYTES`` (the upload route itself also enforces the plan's room).

A slow body is bounded the same way: when the next chunk does not arrive within
``WDS_BODY_TIMEOUT_S`` (30 s) the request is answered 408 ``REQUEST_TIMEOUT`` and closed
(the request head has its own timeout in :mod:`wds.server`). A read notes when it began
waiting, and one sweeper task per process cancels the reads that waited too long: a
timer per read (``asyncio.timeout``) cost ~16 µs on every POST, the note costs nothing.
"""

from __future__ import annotations

import asyncio
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_response
from storage.errors import PayloadTooLarge, ServiceError

_UPLOADS = "/storage/v1/object/"
_NOT_UPLOADS = ("/storage/v1/object/sign/", "/storage/v1/object/list/", "/storage/v1/object/public/")
_CLOSE = {"Connection": "close"}


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


class BodyLimit:
    """See the module docstring. ``app.add_middleware(BodyLimit, max_body=..., max_upload=...)``."""

    def __init__(self, app: ASGIApp, *, max_body: int, max_upload: int, timeout_s: float = 30.0) -> None:
        self.app = app
        self.max_body = max_body
        self.max_upload = max_upload
        self.timeout_s = timeout_s
        self._waiting: dict[asyncio.Task[object], float] = {}  # body reads in progress → since
        self._stalled: set[asyncio.Task[object]] = set()
        self._sweeper: asyncio.Task[None] | None = None

    async def _sweep(self) -> None:
        """Cancel the body reads that have waited longer than the timeout."""
        while True:
            await asyncio.sleep(min(1.0, self.timeout_s / 4))
            deadline = time.monotonic() - self.timeout_s
            for task, since in list(self._waiting.items()):
                if since < deadline and task not in self._stalled:
                    self._stalled.add(task)
                    task.cancel()

    async def _receive(self, receive: Receive) -> Message:
        """``receive()``, or 408 ``REQUEST_TIMEOUT`` when it waits longer than the timeout."""
        task = asyncio.current_task()
        if task is None:
            return await receive()
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="wds-body-timeouts")
        self._waiting[task] = time.monotonic()
        try:
            return await receive()
        except asyncio.CancelledError:
            if task not in self._stalled:
                raise
            self._stalled.discard(task)
            task.uncancel()  # our cancellation, answered here: the request goes on to its 408
            raise ServiceError(f"the request body stalled for {self.timeout_s:g} s",
                               code="REQUEST_TIMEOUT", status=408) from None
        finally:
            self._waiting.pop(task, None)

    def limit_of(self, scope: Scope) -> int:
        path: str = scope["path"]
        upload = path.startswith(_UPLOADS) and not path.startswith(_NOT_UPLOADS)
        if upload and scope["method"] in ("POST", "PUT"):
            return self.max_upload
        return self.max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            # nobody reads a GET's body: uvicorn holds at most ~64 KiB of an unread body
            # (it pauses reading) and drops the rest once the response is sent
            await self.app(scope, receive, send)
            return
        limit = self.limit_of(scope)
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _refuse(PayloadTooLarge(_message(limit)))(scope, receive, send)
            return
        size = 0
        over: ServiceError | None = None
        started = False
        done = False

        async def counted() -> Message:
            nonlocal size, over, done
            if over is not None:  # asked again after the refusal: nothing more comes
                return {"type": "http.disconnect"}
            if done:  # the body is in; what comes now is the disconnect, however late (SSE, streams)
                return await receive()
            try:
                message = await self._receive(receive)
            except ServiceError as exc:
                over = exc
                raise
            if message["type"] == "http.request":
                size += len(message.get("body", b""))
                if size > limit:
                    over = PayloadTooLarge(_message(limit))
                    raise over
                done = not message.get("more_body", False)
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if over is not None:  # whatever the app answers once the limit is crossed, the client gets 413
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, guarded_send)
        except Exception:
            if over is None:
                raise
            # past the limit, a layer that let the refusal through (or turned it into
            # another error) answers nothing: the client gets the refusal below
        if over is not None and not started:
            await _refuse(over)(scope, receive, send)


def _message(limit: int) -> str:
    return f"the request body is larger than {limit:,} bytes"


def _refuse(exc: ServiceError) -> ASGIApp:
    # Connection: close — the unread rest of the body must not be parsed as a next request
    return error_response(exc.status, exc.message, exc.code, _CLOSE)
