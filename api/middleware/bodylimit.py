"""Refuse request bodies over the limit while they stream, before auth or any parsing.

The first check of the API's front layer (:mod:`api.middleware.front`), before CORS,
auth and limits: every step and route after it (the text guard, idempotency, the REST
and MCP fast paths, FastAPI's body parsing, object uploads) reads through the ``receive``
that layer hands on, so none of them can buffer more than the limit:

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

from starlette.types import ASGIApp, Message, Receive

from api.errors import error_response
from storage.errors import PayloadTooLarge, ServiceError

_UPLOADS = "/storage/v1/object/"
_NOT_UPLOADS = ("/storage/v1/object/sign/", "/storage/v1/object/list/", "/storage/v1/object/public/")
_CLOSE = {"Connection": "close"}


class BodyLimits:
    """The limits of :mod:`api.middleware.front`'s body checks, and the stalled-read timeout.

    ``BodyLimits(max_body=..., max_upload=..., timeout_s=...)``; the front layer asks
    :meth:`limit_of` for a request's limit, refuses a declared length over it with
    :func:`refusal` and counts the rest through :meth:`receive`.
    """

    def __init__(self, *, max_body: int, max_upload: int, timeout_s: float = 30.0) -> None:
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

    async def receive(self, receive: Receive) -> Message:
        """``receive()``, or 408 ``REQUEST_TIMEOUT`` when it waits longer than the timeout.

        Raises:
            ServiceError: 408 ``REQUEST_TIMEOUT``.
        """
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

    def limit_of(self, path: str, method: str) -> int:
        """The body limit of a ``method`` call to ``path`` (object uploads have their own)."""
        upload = path.startswith(_UPLOADS) and not path.startswith(_NOT_UPLOADS)
        if upload and method in ("POST", "PUT"):
            return self.max_upload
        return self.max_body

    def too_large(self, limit: int) -> PayloadTooLarge:
        return PayloadTooLarge(_message(limit))


def content_length(value: bytes | None) -> int | None:
    """A ``Content-Length`` header's value (``None``: absent or not a number)."""
    return int(value) if value is not None and value.isdigit() else None


def _message(limit: int) -> str:
    return f"the request body is larger than {limit:,} bytes"


def refusal(exc: ServiceError) -> ASGIApp:
    """The answer to a body over the limit (413) or stalled (408), closing the connection."""
    # Connection: close — the unread rest of the body must not be parsed as a next request
    return error_response(exc.status, exc.message, exc.code, _CLOSE)
