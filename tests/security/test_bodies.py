"""Request bodies over the limit are refused while they stream, before auth or parsing
(issue 22: four unauthenticated 250 MB bodies were read whole before their 401).

Raw sockets, so the test controls exactly what is sent and can show that the answer came
before the body did: the server must answer 413 ``PAYLOAD_TOO_LARGE`` although the client
never finishes sending.
"""

from __future__ import annotations

import json
import select
import socket
from urllib.parse import urlsplit

from service.config import Settings

LIMIT = Settings().max_body_bytes  # the default: the session API runs with it
RECORDS = "/functions/v1/rest-api/tables/1/records"


def _connect(base_url: str) -> socket.socket:
    url = urlsplit(base_url)
    sock = socket.create_connection((url.hostname, url.port), timeout=30)
    return sock


def _response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Read one HTTP/1.1 response (status, headers, body) off ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed without answering: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body[:length]


def _request_head(base_url: str, path: str, extra: str) -> bytes:
    host = urlsplit(base_url).netloc
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{extra}\r\n").encode()


def test_a_declared_body_over_the_limit_is_refused_before_a_byte_of_it_is_read(base_url):
    with _connect(base_url) as sock:
        # 250 MB announced, nothing sent, no token: the answer must not wait for the body
        sock.sendall(_request_head(base_url, RECORDS, "Content-Length: 250000000\r\n"))
        status, headers, body = _response(sock)
    assert status == 413 and headers["connection"] == "close"
    assert json.loads(body)["code"] == "PAYLOAD_TOO_LARGE" and set(json.loads(body)) == {"error", "code"}


def test_a_chunked_body_is_refused_as_soon_as_it_crosses_the_limit(base_url):
    chunk = b"[" + b"0," * 32_767 + b"0]"  # 64 KiB of JSON per chunk
    framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    budget = 4 * LIMIT  # what the client would send if nobody stopped it; it never sends the last chunk
    sent = 0
    with _connect(base_url) as sock:
        sock.sendall(_request_head(base_url, RECORDS, "Transfer-Encoding: chunked\r\n"))
        while sent < budget:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:  # the server answered mid-body
                break
            try:
                sock.sendall(framed)
            except OSError:  # it closed the connection after answering
                break
            sent += len(chunk)
        status, _, body = _response(sock)
    assert status == 413 and json.loads(body)["code"] == "PAYLOAD_TOO_LARGE"
    assert LIMIT < sent < budget  # answered once the limit was crossed, long before the end


def test_bodies_under_the_limit_still_reach_the_route(base_url):
    with _connect(base_url) as sock:
        sock.sendall(_request_head(base_url, RECORDS, "Content-Length: 2\r\n") + b"{}")
        status, _, body = _response(sock)
    assert status == 401 and json.loads(body)["code"] == "UNAUTHORIZED"
