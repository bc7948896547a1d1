"""Connection limits of the API server (issue 22; wds/server.py, api/middleware/bodylimit.py):
header size and count, slow heads and bodies, WebSocket message size. Raw sockets, so
the test sends exactly the abuse it means."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from websockets.exceptions import ConnectionClosed

from tests.conftest import ApiProcess, Services, running_api
from tests.realtime.conftest import open_ws
from tests.security.test_bodies import _response

RECORDS = "/functions/v1/rest-api/tables/1/records"


@pytest.fixture(scope="module")
def impatient_api(services: Services) -> Iterator[ApiProcess]:
    """An API process that waits one second for a request's head and between body chunks
    (and beats realtime hearts every half second)."""
    yield from running_api(services, name="api-impatient", WDS_HEADER_TIMEOUT_S="1", WDS_BODY_TIMEOUT_S="1",
                           WDS_REALTIME_HEARTBEAT_S="0.5")


def _connect(base_url: str) -> socket.socket:
    url = urlsplit(base_url)
    return socket.create_connection((url.hostname, url.port), timeout=30)


def _head(base_url: str, method: str = "GET", path: str = "/healthz") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: {urlsplit(base_url).netloc}\r\n".encode()


def test_too_many_header_fields_are_refused(base_url):
    with _connect(base_url) as sock:
        sock.sendall(_head(base_url) + b"".join(b"X-Pad-%d: 1\r\n" % i for i in range(150)) + b"\r\n")
        status, headers, body = _response(sock)
    assert status == 431 and json.loads(body)["code"] == "HEADERS_TOO_LARGE" and headers["connection"] == "close"


def test_a_huge_header_is_refused_before_it_ends(base_url):
    with _connect(base_url) as sock:
        sock.sendall(_head(base_url) + b"X-Big: ")
        try:
            for _ in range(64):  # up to 4 MiB of one header value, never finished
                sock.sendall(b"a" * 65536)
        except OSError:  # the server answered and closed
            pass
        status, _, body = _response(sock)
    assert status == 431 and json.loads(body)["code"] == "HEADERS_TOO_LARGE"


@pytest.mark.parametrize("request_head", [
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n",  # a space in a header name
    b"GET /a b c HTTP/1.1\r\nHost: x\r\n\r\n",  # a request line that does not parse
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # TLS spoken to the plain port
])
def test_a_request_that_is_not_http_is_answered_in_the_error_shape(base_url, request_head):
    """uvicorn answered these with text/plain "Invalid HTTP request received."."""
    with _connect(base_url) as sock:
        sock.sendall(request_head)
        status, headers, body = _response(sock)
    assert status == 400 and headers["content-type"] == "application/json" and headers["connection"] == "close"
    assert json.loads(body)["code"] == "VALIDATION_ERROR"


def test_a_url_longer_than_the_head_limit_is_431(base_url):
    with _connect(base_url) as sock:
        sock.sendall(_head(base_url, path="/healthz?q=" + "a" * 70_000) + b"\r\n")
        status, _, body = _response(sock)
    assert status == 431 and json.loads(body)["code"] == "HEADERS_TOO_LARGE"


def test_normal_requests_with_many_small_headers_pass(base_url):
    with _connect(base_url) as sock:
        sock.sendall(_head(base_url) + b"".join(b"X-Pad-%d: 1\r\n" % i for i in range(50)) + b"\r\n")
        status, _, _ = _response(sock)
    assert status in (200, 503)  # /healthz answered (503 only while Temporal warms up)


def test_a_head_that_never_ends_times_out(impatient_api):
    with _connect(impatient_api.base_url) as sock:
        sock.sendall(_head(impatient_api.base_url) + b"X-Slow: 1\r\n")  # and then nothing
        status, _, body = _response(sock)
    assert status == 408 and json.loads(body)["code"] == "REQUEST_TIMEOUT"


def test_a_connection_that_sends_nothing_is_closed(impatient_api):
    with _connect(impatient_api.base_url) as sock:
        assert sock.recv(100) == b""  # closed by the server, not held open for ever


def test_a_body_that_stalls_times_out(impatient_api):
    with _connect(impatient_api.base_url) as sock:
        sock.sendall(_head(impatient_api.base_url, "POST", RECORDS)
                     + b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"fields\":")
        status, _, body = _response(sock)
    assert status == 408 and json.loads(body)["code"] == "REQUEST_TIMEOUT"


def test_connections_past_their_head_live_on(impatient_api, ws):
    # a WebSocket outlives the head timeout: four heartbeats are two seconds
    with open_ws(impatient_api.base_url, ws.builder_token) as conn:
        beats = [json.loads(conn.recv(timeout=10)) for _ in range(4)]
    assert {b["type"] for b in beats} == {"heartbeat"}


def test_websocket_messages_over_the_limit_are_refused_as_they_arrive(base_url, ws):
    with open_ws(base_url, ws.builder_token) as conn:
        # over WDS_WS_MAX_MESSAGE_BYTES (64 KiB by default): the head of one 2 MiB text frame
        # (masked, as a client's must be, with a zero key) and its first KiB, then nothing.
        # The server refuses on the announced length, before the payload arrives; the client
        # stops sending, so the close frame is always read (sending all 2 MiB raced the
        # server's close: the client could see the reset before the frame)
        frame_head = bytes([0x81, 0x80 | 127]) + (2 * 1024 * 1024).to_bytes(8, "big") + bytes(4)
        conn.socket.sendall(frame_head + b"x" * 1024)
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                conn.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009  # message too big
