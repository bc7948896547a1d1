"""The API server's connection limits: header size and count, slow heads, WebSocket
messages, idle keep-alive (issue 22; docs/security.md).

uvicorn parses HTTP/1.1 with httptools (llhttp) when it is installed, as here. That parser
has no limit of its own on a request's head: a client may send megabytes of headers, or
trickle them for ever, and uvicorn keeps reading (its ``h11_max_incomplete_event_size``
applies only to the slower pure-Python h11 parser). :class:`BoundedHttpToolsProtocol` is
uvicorn's httptools protocol with three bounds added, each answered with a JSON
``{error, code}`` and the connection closed:

* the request line and headers together at most ``WDS_MAX_HEADER_BYTES`` (64 KiB)
  → 431 ``HEADERS_TOO_LARGE``;
* at most ``WDS_MAX_HEADERS`` (100) header fields → 431 ``HEADERS_TOO_LARGE``;
* the head complete within ``WDS_HEADER_TIMEOUT_S`` (10 s) of the connection opening or
  of the request's first byte → 408 ``REQUEST_TIMEOUT`` (a slowloris holds nothing).

It also sends a response's head and body in one ``send(2)`` (:class:`_Coalescing`) where
uvicorn made two.

:func:`uvicorn_options` gives every way the API is started (``wds serve``, ``wds dev``,
the tests' API processes) the same settings: this protocol, ``ws_max_size`` (WebSocket
messages over ``WDS_WS_MAX_MESSAGE_BYTES`` are refused by the websockets library while
they arrive, close code 1009, never buffered whole), ``timeout_keep_alive`` and, should
h11 be chosen, ``h11_max_incomplete_event_size``. Slow bodies are bounded in the app
(:mod:`api.middleware.bodylimit`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from service.config import Settings, get_settings

PROTOCOL = "wds.server:BoundedHttpToolsProtocol"


class _Coalescing:
    """The connection's transport with the writes of one event-loop step sent as one.

    uvicorn writes a response's head when the app sends ``http.response.start`` and its
    body when the app sends the body: two ``send(2)`` calls and two TCP segments for
    every answer, though the app sends both in the same step. Here writes are gathered
    and handed to the real transport once, at the end of the step (``call_soon``), or at
    once past ``FLUSH_AT`` bytes (so flow control still pauses a large stream as before),
    and before a close. All of the connection's writes go through it, in order.
    """

    FLUSH_AT = 64 * 1024
    __slots__ = ("_loop", "_pending", "_size", "transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None
        self._size = 0

    def write(self, data: bytes) -> None:
        if self._pending is None:
            self._pending = [data]
            self._size = len(data)
            self._loop.call_soon(self.flush)
        else:
            self._pending.append(data)
            self._size += len(data)
        if self._size > self.FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        pending = self._pending
        if pending is None:
            return
        self._pending = None
        if not self.transport.is_closing():
            self.transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def abort(self) -> None:
        self._pending = None
        self.transport.abort()

    def __getattr__(self, name: str) -> Any:  # is_closing, get_extra_info, set_protocol, ...
        return getattr(self.transport, name)


class _HeadRefused(Exception):
    """Raised in a parser callback; httptools turns it into a parser error uvicorn handles."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with bounded request heads (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = get_settings()
        self._max_head = settings.max_header_bytes
        self._max_fields = settings.max_headers
        self._head_timeout = settings.header_timeout_s
        self._head_open = True  # until the first request's head is complete
        self._head_since = 0.0  # loop time the open head began (connection or first byte)
        self._head_bytes = 0
        self._head_fields = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._refusal: tuple[int, str, str] | None = None
        self._chunk = 0  # bytes of the data being parsed

    # ------------------------------------------------------------------ connection
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = _Coalescing(transport, self.loop)  # type: ignore[assignment]
        # one timer per connection, not per request: it looks at the open head when it
        # fires and re-arms itself (a request only notes the time its head began)
        self._head_since = self.loop.time()
        self._arm(self._head_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None:
            return
        self._chunk = len(data)  # what send_400_response may blame, if the parser fails on it
        super().data_received(data)
        if self._head_open and self._refusal is None:
            # every byte since the request began is head until its headers are complete
            self._head_bytes += len(data)
            if self._head_bytes > self._max_head:
                self._refuse(431, f"the request line and headers exceed {self._max_head:,} bytes",
                             "HEADERS_TOO_LARGE")

    # ------------------------------------------------------------------ parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_open, self._head_bytes, self._head_fields = True, 0, 0
        self._head_since = self.loop.time()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_fields += 1
        if self._head_fields > self._max_fields:
            self._refusal = (431, f"a request has at most {self._max_fields} header fields", "HEADERS_TOO_LARGE")
            raise _HeadRefused
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head_open = False
        super().on_headers_complete()

    def handle_websocket_upgrade(self) -> None:
        coalescing = self.transport
        if isinstance(coalescing, _Coalescing):  # the WebSocket protocol gets the real transport
            coalescing.flush()
            self.transport = coalescing.transport
        super().handle_websocket_upgrade()

    def send_400_response(self, msg: str) -> None:
        if self._refusal is not None:  # a callback above refused the head: say why
            status, message, code = self._refusal
            self._refusal = None
            self._refuse(status, message, code)
            return
        # uvicorn's own answer is text/plain ("Invalid HTTP request received."): every error
        # of the service is {error, code}
        # the parser (or uvicorn's URL parse, when the head completes) gave up on a head
        # longer than the limit, before data_received counted its last bytes
        if self._head_bytes + self._chunk > self._max_head:
            self._refuse(431, f"the request line and headers exceed {self._max_head:,} bytes", "HEADERS_TOO_LARGE")
            return
        self._refuse(400, "the request is not valid HTTP/1.1 (a malformed request line or header);"
                     " nothing was done", "VALIDATION_ERROR")

    # ------------------------------------------------------------------ helpers
    def _arm(self, delay: float) -> None:
        self._head_timer = self.loop.call_later(delay, self._check_head)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _check_head(self) -> None:
        self._head_timer = None
        # closed, or upgraded to a WebSocket (the transport has another protocol now)
        if self.transport.is_closing() or self.transport.get_protocol() is not self:
            return
        waited = self.loop.time() - self._head_since
        if not self._head_open or waited < self._head_timeout:
            self._arm(self._head_timeout - waited if self._head_open else self._head_timeout)
            return
        if self._head_bytes == 0:
            self.transport.close()  # not a byte: nobody to answer (Go's ReadHeaderTimeout does the same)
            return
        self._refuse(408, f"the request's headers did not arrive within {self._head_timeout:g} s",
                     "REQUEST_TIMEOUT")

    def _refuse(self, status: int, message: str, code: str) -> None:
        self._refusal = (status, message, code)
        self._disarm()
        if self.transport.is_closing():
            return
        body = orjson.dumps({"error": message, "code": code})
        self.transport.write(b"".join([
            STATUS_LINE[status], b"content-type: application/json\r\n",
            b"content-length: ", str(len(body)).encode(), b"\r\n", b"connection: close\r\n\r\n", body,
        ]))
        self.transport.close()


def uvicorn_options(settings: Settings | None = None) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run`` / ``uvicorn.Config`` with the limits above."""
    s = settings or get_settings()
    return {
        "http": PROTOCOL,
        "ws_max_size": s.ws_max_message_bytes,
        # no permessage-deflate: every change would be compressed once per socket on the
        # event loop (300 sockets and three 1.8 MB records held it 2.2 s; 0.8 s without)
        "ws_per_message_deflate": False,
        "timeout_keep_alive": s.keep_alive_s,
        "h11_max_incomplete_event_size": s.max_header_bytes,
    }


def uvicorn_args(settings: Settings | None = None) -> list[str]:
    """The same as command-line options of ``python -m uvicorn``."""
    return [arg for key, value in uvicorn_options(settings).items()
            for arg in (f"--{key.replace('_', '-')}", str(value))]


def uvicorn_args_for(env: Mapping[str, str]) -> list[str]:
    """Command-line options for a ``python -m uvicorn`` child that will run with ``env``
    (its ``WDS_*`` variables decide, as :class:`Settings` would read them in the child)."""
    fields = Settings.model_fields
    given = {k[4:].lower(): v for k, v in env.items() if k.startswith("WDS_") and k[4:].lower() in fields}
    return uvicorn_args(Settings(**given))
