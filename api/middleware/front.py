"""The API's one ASGI layer in front of the router: every per-request check in one pass.

It does, in this order, what five stacked middlewares did (each wrapping ``receive`` and
``send`` again, scanning the headers again and costing 10–30 µs a request; profile and
figures in ``bench/RESULTS-hotpath.md``):

1. **metrics** — the Prometheus request histogram of every HTTP call, observed last,
   around everything below (:func:`api.middleware.metrics.observe_request`);
2. **body limit** — a declared body over the limit is answered 413 at once, before auth;
   a longer or stalled one is refused as it streams (:mod:`api.middleware.bodylimit`);
3. **CORS** — Starlette's ``CORSMiddleware`` (preflights, the ``Access-Control-*``
   headers), run only when the request carries an ``Origin`` header; without one, the
   only thing it added to an answer, ``Vary: Origin``, is added here;
4. **limits and usage** — on the API doors: the caller resolved and rate limits and
   quotas applied before routing, the workspace's slot taken, the ``X-RateLimit-*``
   headers added to the answer, the call logged (:mod:`api.middleware.usage`);
5. **text guard** — a JSON body holding a lone UTF-16 surrogate escape is answered 400
   (:mod:`api.middleware.textguard`);
6. **idempotency** — only when the call has an ``Idempotency-Key`` header
   (:mod:`api.middleware.idempotency`);
7. the **fast path** (``fast``: :class:`api.doors.fastpath.FastReads`, given by
   :mod:`api.app`, which wraps FastAPI's router), or the router.

The headers every step needs are read in one scan of the request head and kept in the
scope state (``wds_headers``: authorization, content-type, content-length, origin,
idempotency-key, prefer; the first of each) for the fast path. A body read by the text
guard is read once and handed on (idempotency, the fast path, FastAPI) unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_response
from api.middleware import idempotency, textguard, usage
from api.middleware.bodies import read_body, replay
from api.middleware.bodylimit import BodyLimits, content_length, refusal
from api.middleware.metrics import observe_request
from storage.errors import ServiceError

HEADERS_KEY = "wds_headers"  # scope state: the request headers the front layer read (name → first value)
_WANTED = frozenset({b"authorization", b"content-type", b"content-length", b"origin", b"idempotency-key",
                     b"prefer"})
_NO_BODY = frozenset({"GET", "HEAD", "OPTIONS"})
_CALL_KEY = "wds_front_call"  # scope state: the call, for the CORS path
_VARY = (b"vary", b"Origin")


class _Call:
    """One HTTP call going through the front layer: what its steps note about it."""

    __slots__ = ("app_status", "body_limits", "done", "door", "limit", "over", "raw_receive", "raw_send",
                 "route", "size", "st", "started", "status", "vary")

    def __init__(self, send: Send, st: dict[str, Any], door: str | None) -> None:
        self.raw_send = send
        self.st = st
        self.door = door
        self.status = 500  # an exception that escapes every handler is answered 500 by Starlette
        self.app_status = 500  # the status the app answered (the usage log's), before a body refusal
        self.started = False
        self.over: ServiceError | None = None  # the body's refusal, once it crossed the limit or stalled
        self.vary = True  # add ``Vary: Origin`` (CORS's own layer does it when there is an Origin)
        self.route: str | None = None
        self.raw_receive: Receive | None = None
        self.body_limits: BodyLimits | None = None
        self.limit = 0
        self.size = 0
        self.done = False

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.app_status = message["status"]
            if self.vary:  # not through CORS: the rate-limit headers, then what CORS added
                if self.door is not None:
                    usage.add_limit_headers(self.st, message)
                _add_vary(message)
            if self.over is not None:  # whatever the app answers once the limit is crossed, the client gets 413
                return
            self.started = True
            self.status = self.app_status
        elif self.over is not None:
            return
        await self.raw_send(message)

    async def receive(self) -> Message:
        """The body counted against the limit as it arrives (calls that may have one)."""
        if self.over is not None:  # asked again after the refusal: nothing more comes
            return {"type": "http.disconnect"}
        if self.done:  # the body is in; what comes now is the disconnect, however late (SSE, streams)
            return await self.raw_receive()  # type: ignore[misc]
        try:
            message = await self.body_limits.receive(self.raw_receive)  # type: ignore[union-attr, arg-type]
        except ServiceError as exc:
            self.over = exc
            raise
        if message["type"] == "http.request":
            self.size += len(message.get("body", b""))
            if self.size > self.limit:
                self.over = self.body_limits.too_large(self.limit)  # type: ignore[union-attr]
                raise self.over
            self.done = not message.get("more_body", False)
        return message


def _add_vary(message: Message) -> None:
    """``Vary: Origin`` as Starlette's CORS middleware sets it on an answer to a request
    without ``Origin`` (merged into a ``Vary`` the answer has)."""
    headers = message.get("headers") or ()
    for name, _ in headers:
        if name == b"vary":
            message["headers"] = list(headers)
            merged = MutableHeaders(scope=message)
            merged["Vary"] = ", ".join([*merged.getlist("Vary"), "Origin"])
            return
    message["headers"] = [*headers, _VARY]


class Front:
    """See the module docstring. ``app.add_middleware(Front, max_body=..., max_upload=...,
    timeout_s=..., cors={...CORSMiddleware options}, fast=FastReads)``; the only
    middleware the application adds."""

    def __init__(self, app: ASGIApp, *, max_body: int, max_upload: int, timeout_s: float = 30.0,
                 cors: Mapping[str, Any], fast: Callable[[ASGIApp], ASGIApp] | None = None) -> None:
        self.app = app
        self.inner = fast(app) if fast is not None else app
        self.bodies = BodyLimits(max_body=max_body, max_upload=max_upload, timeout_s=timeout_s)
        self.cors = CORSMiddleware(self._through_cors, **cors)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            if name in _WANTED and name not in headers:
                headers[name] = value
        st: dict[str, Any] = scope.setdefault("state", {})
        st[HEADERS_KEY] = headers
        path: str = scope["path"]
        method: str = scope["method"]
        call = _Call(send, st, usage.door_of(path))
        began = time.perf_counter()
        try:
            if method not in _NO_BODY:
                # nobody reads a GET's body: uvicorn holds at most ~64 KiB of an unread body
                # (it pauses reading) and drops the rest once the response is sent
                limit = self.bodies.limit_of(path, method)
                declared = content_length(headers.get(b"content-length"))
                if declared is not None and declared > limit:
                    call.vary = False  # refused before CORS and limits: no header of theirs
                    await refusal(self.bodies.too_large(limit))(scope, receive, call.send)
                    return
                call.limit, call.raw_receive, call.body_limits = limit, receive, self.bodies
                receive = call.receive
            try:
                if b"origin" in headers:
                    call.vary = False
                    st[_CALL_KEY] = call
                    await self.cors(scope, receive, call.send)
                else:
                    await self._api(scope, receive, call.send, call)
            except Exception:
                if call.over is None:
                    raise
                # past the limit, a step that let the refusal through (or turned it into
                # another error) answers nothing: the client gets the refusal below
            if call.over is not None and not call.started:
                await refusal(call.over)(scope, call.raw_receive or receive, send)
                call.status = call.over.status
        finally:
            route = call.route if call.route is not None else usage.route_template(scope)
            observe_request(call.door, route, method, call.status, time.perf_counter() - began)

    async def _through_cors(self, scope: Scope, receive: Receive, send: Send) -> None:
        """What CORS wraps (requests with an ``Origin`` header): the steps below it, with
        the rate-limit headers added before CORS adds its own."""
        call: _Call = scope["state"][_CALL_KEY]
        st = call.st

        async def limited(message: Message) -> None:
            if message["type"] == "http.response.start" and call.door is not None:
                usage.add_limit_headers(st, message)
            await send(message)

        await self._api(scope, receive, limited, call)

    async def _api(self, scope: Scope, receive: Receive, send: Send, call: _Call) -> None:
        """Limits, the workspace slot and the usage log of the API doors, then the body
        checks and the app."""
        door = call.door
        if door is None:  # not an API door (admin, health, publishing, ...): no limits, no usage log
            await self._checked(scope, receive, send, call)
            return
        began = time.perf_counter()
        st = call.st
        try:
            refused = await usage.admit(scope, st, door, st[HEADERS_KEY].get(b"authorization"))
            if refused is not None:
                await refused(scope, receive, send)
                return
            try:
                release = await usage.take_slot(scope, st, door)
            except ServiceError as exc:
                await error_response(exc.status, exc.message, exc.code, exc.headers or None)(scope, receive, send)
                return
            try:
                await self._checked(scope, receive, send, call)
            finally:
                release()
        finally:
            call.route = usage.route_template(scope)
            usage.record(scope, st, door, call.route, call.app_status, time.perf_counter() - began)

    async def _checked(self, scope: Scope, receive: Receive, send: Send, call: _Call) -> None:
        """The text guard and idempotency steps, then the fast path or the router."""
        method: str = scope["method"]
        if method in _NO_BODY:
            await self.inner(scope, receive, send)
            return
        headers = call.st[HEADERS_KEY]
        path: str = scope["path"]
        body: bytes | None = None
        refused = textguard.media_refusal(call.door, method, headers.get(b"content-type"), headers.get(b"content-length"))
        if refused is not None:
            await refused(scope, receive, send)
            return
        if textguard.applies(method, path, headers.get(b"content-type")):
            read = await read_body(receive)
            if read is None:  # the client left
                return
            body = read[0]
            refused = textguard.refusal(body)
            if refused is not None:
                await refused(scope, receive, send)
                return
        key = headers.get(b"idempotency-key")
        if key is not None and idempotency.applies(method, path):
            await idempotency.serve(self.inner, scope, receive, send, key, body)
            return
        await self.inner(scope, receive if body is None else replay(body, False, receive), send)
