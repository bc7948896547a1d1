"""Reading a request body in an ASGI layer and handing it on to the app unchanged.

Several pure ASGI layers look at a request's body before the app does (the idempotency
key's request hash, the JSON text guard, the SQL fast path). Each reads it with
:func:`read_body` and passes the app :func:`replay`, which yields the bytes already read
and then whatever is left of the stream, so the app sees the request as it was sent.
"""

from __future__ import annotations

from starlette.types import Message, Receive


async def read_body(receive: Receive, *, limit: int | None = None) -> tuple[bytes, bool] | None:
    """``(body, more)``: the body read up to just past ``limit`` bytes (all of it when
    ``limit`` is ``None``), ``more`` telling whether the stream goes on; ``None`` when the
    client left before sending it all (there is nobody to answer)."""
    chunks: list[bytes] = []
    size = 0
    more = True
    while more and (limit is None or size <= limit):
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks), more


def replay(body: bytes, more: bool, receive: Receive) -> Receive:
    """A ``receive`` that hands the app ``body`` first, then the rest of the stream."""
    pending = True

    async def replayed() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": more}
        return await receive()

    return replayed
