"""Realtime test helpers: a WebSocket client that skips heartbeats, and a tuned API process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

from tests.conftest import ApiProcess, Services, start_api


def ws_url(base_url: str, token: str | None = None, **query: Any) -> str:
    url = base_url.replace("http://", "ws://") + "/realtime/v1"
    params = {**({"token": token} if token else {}), **query}
    if params:
        url += "?" + "&".join(f"{k}={v}" for k, v in params.items())
    return url


def open_ws(base_url: str, token: str | None = None, **kw: Any) -> ClientConnection:
    max_queue = kw.pop("max_queue", 64)
    return connect(ws_url(base_url, token, **kw), open_timeout=10, max_queue=max_queue)


def recv(conn: ClientConnection, timeout: float = 10.0, skip: tuple[str, ...] = ("heartbeat",)) -> dict[str, Any]:
    """The next message that is not a heartbeat."""
    while True:
        msg = json.loads(conn.recv(timeout=timeout))
        if msg.get("type") not in skip:
            return msg


def subscribe(conn: ClientConnection, table: Any, **extra: Any) -> dict[str, Any]:
    conn.send(json.dumps({"type": "subscribe", "table": table, **extra}))
    msg = recv(conn)
    assert msg["type"] == "subscribed", msg
    return msg


def changes(conn: ClientConnection, n: int, timeout: float = 15.0) -> list[dict[str, Any]]:
    out = []
    while len(out) < n:
        msg = recv(conn, timeout=timeout)
        assert msg["type"] == "change", msg
        out.append(msg)
    return out


@pytest.fixture(scope="module")
def tuned_api(services: Services) -> Iterator[ApiProcess]:
    """A second API process: tiny per-client queue and a fast heartbeat."""
    proc = start_api(services, name="api-rt", WDS_REALTIME_QUEUE_MAX="5", WDS_REALTIME_HEARTBEAT_S="0.5")
    try:
        yield proc
    finally:
        proc.stop()
