"""Idempotency keys of record writes, scoped to a token (``wds.idempotency_keys``).

A key is claimed before the write runs (``status = 0``), then completed with the first
response's JSON text (m0019: ``json``, kept byte for byte); a repeat with the same key and request replays that response; the same key
with a different request is a conflict. Keys are kept 24 hours.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

Conn = AsyncConnection[Any]
RETENTION = "24 hours"


@dataclass(frozen=True, slots=True)
class Claim:
    """Outcome of claiming a key: ``new`` (go ahead), ``replay``, ``mismatch`` or ``busy``."""

    state: str
    status: int = 0
    response: str | None = None  # the first answer's JSON text, as it was sent


async def claim(conn: Conn, *, token_id: int, key: str, request_hash: str) -> Claim:
    cur = await conn.execute(
        "INSERT INTO wds.idempotency_keys (token_id, key, request_hash, status) VALUES (%s, %s, %s, 0)"
        " ON CONFLICT (token_id, key) DO UPDATE SET request_hash = excluded.request_hash, status = 0,"
        "   response = NULL, created_at = now()"
        "   WHERE wds.idempotency_keys.created_at < now() - interval '24 hours'"
        " RETURNING 1",
        (token_id, key, request_hash),
    )
    if await cur.fetchone() is not None:
        return Claim("new")
    cur = await conn.execute(
        "SELECT request_hash, status, response::text AS response FROM wds.idempotency_keys"
        " WHERE token_id = %s AND key = %s",
        (token_id, key),
    )
    row = await cur.fetchone()
    if row is None:  # released between the two statements: the caller may simply retry
        return Claim("busy")
    if row["request_hash"] != request_hash:
        return Claim("mismatch")
    if row["status"] == 0:
        return Claim("busy")
    return Claim("replay", row["status"], row["response"])


async def complete(conn: Conn, *, token_id: int, key: str, status: int, response: bytes | None) -> None:
    """Store the first answer's JSON text (``json``: kept as written, so a replay is the
    same bytes; jsonb would reorder the keys)."""
    await conn.execute(
        "UPDATE wds.idempotency_keys SET status = %s, response = %s::json WHERE token_id = %s AND key = %s",
        (status, response.decode() if response else None, token_id, key),
    )


async def release(conn: Conn, *, token_id: int, key: str) -> None:
    """Forget a claim whose request failed on our side, so a retry can run it."""
    await conn.execute("DELETE FROM wds.idempotency_keys WHERE token_id = %s AND key = %s AND status = 0",
                       (token_id, key))


async def purge(conn: Conn) -> int:
    cur = await conn.execute(
        "DELETE FROM wds.idempotency_keys WHERE created_at < now() - interval '24 hours'"
    )
    return cur.rowcount
