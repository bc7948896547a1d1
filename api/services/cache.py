"""Per-process caches of workspace schemas and resolved tokens, invalidated across processes.

Metadata writes call :meth:`Caches.notify` inside their transaction
(``pg_notify('wds_invalidate', ...)`` is delivered on commit) and every API process
LISTENs on that channel. A generation counter per key stops a load that raced with an
invalidation from caching the stale result. TTLs bound staleness should a notification
be missed (e.g. while the listener reconnects).

Failed token lookups are cached too, briefly (``MISS_TTL_S``) and in a bounded LRU
(``MISS_MAX`` hashes), so a flood of one bad token costs one query per few seconds, not
one per request, and memory cannot grow with the number of distinct bad tokens. Any
token change (create, rotate, revoke, grants) drops the misses with the rest.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from prometheus_client import Counter

from storage.access import Principal
from storage.schema import WorkspaceSchema

log = logging.getLogger("wds.cache")
CHANNEL = "wds_invalidate"
SCHEMA_TTL_S = 60.0
TOKEN_TTL_S = 5.0
MISS_TTL_S = 5.0
MISS_MAX = 10_000
# /metrics: token lookups that reached the database (a cache hit or cached miss does not count)
TOKEN_LOOKUPS = Counter(
    "wds_token_lookups", "Bearer-token lookups that reached the database, by result (found, missing)", ("result",),
)


class Caches:
    def __init__(self) -> None:
        self._schemas: dict[int, tuple[float, WorkspaceSchema]] = {}
        self._schema_gen: dict[int, int] = {}
        self._tokens: dict[str, tuple[float, Principal]] = {}
        self._misses: OrderedDict[str, float] = OrderedDict()  # token hash → when the lookup missed
        self._token_gen = 0
        self._listener: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ schemas
    async def schema(self, workspace_id: int, load: Callable[[], Awaitable[WorkspaceSchema]]) -> WorkspaceSchema:
        hit = self._schemas.get(workspace_id)
        now = time.monotonic()
        if hit is not None and now - hit[0] < SCHEMA_TTL_S:
            return hit[1]
        gen = self._schema_gen.get(workspace_id, 0)
        value = await load()
        if self._schema_gen.get(workspace_id, 0) == gen:
            self._schemas[workspace_id] = (now, value)
        return value

    def drop_schema(self, workspace_id: int) -> None:
        self._schema_gen[workspace_id] = self._schema_gen.get(workspace_id, 0) + 1
        self._schemas.pop(workspace_id, None)

    # ------------------------------------------------------------------ tokens
    async def principal(
        self, token_hash: str, load: Callable[[], Awaitable[Principal | None]]
    ) -> Principal | None:
        hit = self._tokens.get(token_hash)
        now = time.monotonic()
        if hit is not None and now - hit[0] < TOKEN_TTL_S:
            return hit[1]
        missed = self._misses.get(token_hash)
        if missed is not None:
            if now - missed < MISS_TTL_S:
                return None
            del self._misses[token_hash]
        gen = self._token_gen
        value = await load()
        TOKEN_LOOKUPS.labels("found" if value is not None else "missing").inc()
        if gen == self._token_gen:
            if value is not None:
                if len(self._tokens) > 50_000:
                    self._tokens.clear()
                self._tokens[token_hash] = (now, value)
            else:
                self._misses[token_hash] = now
                while len(self._misses) > MISS_MAX:
                    self._misses.popitem(last=False)  # the oldest miss goes first
        return value

    def cached_misses(self) -> int:
        """How many failed lookups are cached (bounded by ``MISS_MAX``)."""
        return len(self._misses)

    def drop_tokens(self) -> None:
        self._token_gen += 1
        self._tokens.clear()
        self._misses.clear()

    # ------------------------------------------------------------------ cross-process
    @staticmethod
    async def notify(conn: psycopg.AsyncConnection[Any], *, workspace_id: int | None = None, tokens: bool = False) -> None:
        """Queue an invalidation for every API process (delivered when the transaction commits)."""
        if workspace_id is not None:
            await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"schema:{workspace_id}"))
        if tokens:
            await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, "tokens"))

    def apply(self, payload: str) -> None:
        if payload == "tokens":
            self.drop_tokens()
        elif payload.startswith("schema:") and payload[7:].isdigit():
            self.drop_schema(int(payload[7:]))
            # grants may reference the changed tables
            self.drop_tokens()

    def start_listener(self, dsn: str) -> None:
        self._listener = asyncio.create_task(self._listen(dsn), name="wds-cache-listener")

    async def stop_listener(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            try:
                await self._listener
            except (asyncio.CancelledError, Exception):
                pass

    async def _listen(self, dsn: str) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    # anything may have changed while we were not listening
                    self._schemas.clear()
                    self.drop_tokens()
                    async for note in conn.notifies():
                        self.apply(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # connection lost: retry; TTLs bound staleness meanwhile
                log.warning("cache listener reconnecting: %s", exc)
                await asyncio.sleep(1.0)
