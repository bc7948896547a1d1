"""The ceiling of an HTTP read on this machine: a bare ASGI app on the same uvicorn.

It answers every request with a fixed record-sized JSON body, without routing,
middleware, authentication or a database. ``records.get`` measures it beside the API's
GET by id with the same client, worker count and concurrency: no Python service behind
uvicorn can exceed it, so it bounds what the psycopg ratio can reach here.
"""

from __future__ import annotations

from starlette.types import Receive, Scope, Send

BODY = (b'{"id":4242,"fields":{"Name":"row 4242","Score":512,"Status":"opt_0123abcd"},'
        b'"created_at":"2026-11-22T20:39:32.884360+00:00","updated_at":"2026-11-22T20:39:32.884360+00:00"}')
_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": BODY})
