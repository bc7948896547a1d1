"""``Idempotency-Key`` on record writes (POST, PATCH, DELETE of records and batches).

A step of the front layer (:mod:`api.middleware.front`), taken only when the header is
there, after limits resolved the principal and the text guard read the body: a repeat of
a write with the same key and the same request (method, path, query, body) replays the
stored first response (header ``Idempotent-Replayed: true``) without writing again; the same key with
a different request is 409 ``CONFLICT``; a key whose first request is still running is
409 too. Keys are scoped to the token and kept 24 hours. A first request that fails on
our side (5xx) releases its key so that a retry runs it.
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.deps import resolve_principal
from api.errors import error_response
from api.middleware.bodies import read_body, replay
from api.services.limits import PRINCIPAL_KEY
from storage import idempotency
from storage.errors import ServiceError

log = logging.getLogger("wds.idempotency")
_PATHS = re.compile(r"^/functions/v1/rest-api/tables/[^/]+/records(?:/[^/]+)?/?$")
_METHODS = {"POST", "PATCH", "DELETE"}
MAX_KEY = 255
MAX_STORED = 5_000_000  # bytes of response kept for replay


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope.get("headers", ()):
        if k == name:
            return v.decode("latin-1")
    return None


def applies(method: str, path: str) -> bool:
    """Whether a call with an ``Idempotency-Key`` header is a record write the key covers."""
    return method in _METHODS and _PATHS.match(path) is not None


async def serve(app: ASGIApp, scope: Scope, receive: Receive, send: Send, key_header: bytes,
                body: bytes | None) -> None:
    """Answer a record write that carries an ``Idempotency-Key`` (``key_header``): replay,
    409, or ``app`` with the response stored. ``body`` is the request body when the caller
    has read it already (``None``: read here)."""
    key = key_header.decode("latin-1")
    if not key.strip() or len(key) > MAX_KEY:
        await error_response(400, f"Idempotency-Key must be 1 to {MAX_KEY} characters", "VALIDATION_ERROR")(
            scope, receive, send)
        return
    state = scope["app"].state.wds
    principal = (scope.get("state") or {}).get(PRINCIPAL_KEY)
    if principal is None:
        auth = _header(scope, b"authorization") or ""
        scheme, _, secret = auth.partition(" ")
        try:
            principal = await resolve_principal(state, secret.strip()) if scheme.lower() == "bearer" else None
        except ServiceError:
            principal = None
    if principal is None:  # the route answers 401 itself
        await app(scope, receive if body is None else replay(body, False, receive), send)
        return
    if body is None:
        read = await read_body(receive)
        if read is None:  # the client left: nobody to answer, nothing to claim
            return
        body = read[0]
    digest = hashlib.sha256(
        b"\n".join([scope["method"].encode(), scope["path"].encode(), scope.get("query_string", b""), body])
    ).hexdigest()
    token_id = principal.token_id
    try:
        async with state.db.connection() as conn:
            claim = await idempotency.claim(conn, token_id=token_id, key=key, request_hash=digest)
    except ServiceError as exc:
        await error_response(exc.status, exc.message, exc.code)(scope, receive, send)
        return
    if claim.state == "mismatch":
        await error_response(409, "this Idempotency-Key was used with a different request", "CONFLICT")(
            scope, receive, send)
        return
    if claim.state == "busy":
        await error_response(409, "a request with this Idempotency-Key is still running", "CONFLICT")(
            scope, receive, send)
        return
    if claim.state == "replay":
        headers = [(b"content-type", b"application/json"), (b"idempotent-replayed", b"true")]
        payload = claim.response.encode() if claim.response is not None else b"null"  # the first answer's bytes
        await send({"type": "http.response.start", "status": claim.status,
                    "headers": [*headers, (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})
        return

    status = 500
    chunks: list[bytes] = []
    finished = False

    async def capture(message: Message) -> None:
        nonlocal status, finished
        if message["type"] == "http.response.start":
            status = message["status"]
            message["headers"] = [*message.get("headers", ()), (b"idempotent-replayed", b"false")]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                # store the response before the client can see it: a repeat sent the
                # moment this answer arrives must find it, not a key still "running"
                finished = True
                await _finish(state, token_id, key, status, b"".join(chunks))
        await send(message)

    try:
        await app(scope, replay(body, False, receive), capture)
    finally:
        if not finished:
            await _finish(state, token_id, key, status, b"".join(chunks))


async def _finish(state: Any, token_id: int, key: str, status: int, payload: bytes) -> None:
    try:
        async with state.db.connection() as conn:
            if status >= 500 or len(payload) > MAX_STORED:
                await idempotency.release(conn, token_id=token_id, key=key)
                return
            try:
                if payload:
                    orjson.loads(payload)  # JSON (the json column checks it again), or not kept
            except orjson.JSONDecodeError:
                await idempotency.release(conn, token_id=token_id, key=key)
                return
            await idempotency.complete(conn, token_id=token_id, key=key, status=status, response=payload or None)
    except ServiceError as exc:  # database gone: the claim expires with the retention window
        log.warning("idempotency key not recorded: %s", exc.message)
