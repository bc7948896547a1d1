"""Plan limits for every door: per-minute rate limits, monthly quotas, plan ceilings.

One entry point for every door — REST, SQL, MCP and chat::

    await enforce_limits(state, principal, door, scope=request.scope)

It runs after the caller's token is resolved, and in this order:

1. **Rate limits** (``limits`` library, moving 60-second window — at most N requests in
   any 60 seconds, not a refilling bucket): per workspace by plan (``Plan.requests_per_minute``,
   60 / 600 / 3,000 / 10,000 / unlimited) → 429 ``PLAN_RATE_LIMIT_API`` with ``upgrade:
   true``; per token ``TOKEN_REQUESTS_PER_MINUTE`` (3,000) on every plan → 429
   ``TOKEN_RATE_LIMIT``. Both answer ``Retry-After``: the seconds until the oldest request
   of the full window leaves it, i.e. until a request would be accepted. With
   ``WDS_REDIS_URL`` the windows live in Redis and every API process shares them; without
   it they are in this process's memory (correct for a single API process only). In either
   store a busy key is served by *quota leasing* (``WDS_RATE_LIMIT_LEASES``, on by
   default): one call to the store takes up to 32 hits of the window, which this process
   then hands out for at most a second; near the limit every request is one exact hit
   (:class:`RateLimiter`). With Redis, busy keys' leases are prefetched: four times a
   second a task refills every lease about to run out, 32 keys a round trip, so a busy
   key's requests do not wait for a round trip of their own. ``WDS_RATE_LIMITS=false``
   turns rate limits off (quotas stay on). If Redis fails, requests are let through
   (logged): the data stays available.
2. **The monthly API-request quota** (:mod:`storage.quotas`) → 402
   ``PLAN_LIMIT_API_REQUESTS`` with ``upgrade: true``; counted in memory, written once a
   second, no database round trip per request.

The call's ``X-RateLimit-Limit/-Remaining/-Reset`` headers (``Reset``: seconds until a
slot frees) report the limit that binds a single token first (the plan's, or the token
ceiling when that is lower or the plan is unlimited). With ``scope``, the principal and
the headers' values are stashed in it so the front layer (:mod:`api.middleware.usage`)
adds the headers to the response and logs the call under the workspace and token; a
second call for the same request is a no-op, so a door may call it even where the
middleware already did.

REST, SQL and bearer-token storage calls are covered by the middleware (it resolves the
token with :func:`api.deps.resolve_principal`, or an app-user session, before routing);
MCP and chat, whose principals are resolved inside their handlers, call
:func:`enforce_limits` themselves right after resolving (``scope=request.scope``).

Other quotas are charged where the work happens: :func:`charge_automation_runs`
(pipelines), :func:`check_table_quota` (table creation), :func:`check_storage_quota`
(uploads), :func:`charge_builds` (publishing) and :func:`check_ai_credits` /
:func:`charge_ai_credits` (AI).
"""

from __future__ import annotations

import asyncio
import bisect
import inspect
import logging
import math
import os
import time
from collections.abc import Callable, MutableMapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
from limits import RateLimitItem, RateLimitItemPerMinute
from limits.aio.storage import MemoryStorage as AsyncMemoryStorage
from limits.aio.strategies import MovingWindowRateLimiter
from limits.storage import MemoryStorage as SyncMemoryStorage
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter as SyncMovingWindowRateLimiter
from redis.exceptions import NoScriptError

from api.services.fairness import RunFairness
from api.state import AppState
from service.config import Settings
from storage import quotas as q
from storage.access import Principal
from storage.errors import PlanLimit, RateLimited, Unavailable
from storage.plans import TOKEN_REQUESTS_PER_MINUTE
from storage.plans import plan as plan_of
from storage.quotas import QuotaBook
from storage.slots import KeyedSlots
from storage.usage import UsageBuffer

log = logging.getLogger("wds.limits")

PRINCIPAL_KEY = "principal"  # same key rest_principal uses (request.state.principal)
HEADERS_KEY = "wds_limit_headers"
DONE_KEY = "wds_limits_done"
FLUSH_S = 1.0


# --------------------------------------------------------------------------- rate limits


class _Sweep:
    """The expired-entry sweep of limits' in-process stores, run inline at most once a
    second instead of the library's own: after every hit the async store schedules a
    thread hand-off (``asyncio.to_thread``) and the sync one a ``threading.Timer`` for a
    bisect on every key, so under load the event loop serves a constant stream of thread
    hand-offs (measured: GETs with limits on lost ~18 % of their throughput to it). The
    sweep only frees memory; whether a hit fits the window is decided from the entries'
    timestamps (``acquire_entry``), so doing it less often changes no answer."""

    SWEEP_EVERY_S = 1.0
    events: dict[str, list[Any]]
    locks: Any
    expirations: dict[str, float]
    storage: Any

    def _maybe_sweep(self) -> None:
        now = time.monotonic()
        if now - getattr(self, "_swept", 0.0) < self.SWEEP_EVERY_S:
            return
        self._swept = now
        self._sweep(time.time())

    def _sweep(self, now: float) -> None:
        # no await inside: atomic on the event loop, as the base's locks would make it
        for key in list(self.events):
            events = self.events[key]
            keep = bisect.bisect_left(events, -now, key=lambda entry: -entry.expiry)
            if keep == len(events):
                continue  # nothing expired: no copy (a full window is thousands of entries)
            if keep:
                self.events[key] = events[:keep]
            else:
                self.events.pop(key, None)
                lock = self.locks.get(key)
                if lock is not None and not _held(lock):
                    self.locks.pop(key, None)
        for key, expires in list(self.expirations.items()):
            if expires <= now:
                self.storage.pop(key, None)
                self.expirations.pop(key, None)


def _held(lock: Any) -> bool:
    locked = getattr(lock, "locked", None)  # asyncio.Lock; an RLock (sync store) is held only inside a call
    return bool(locked()) if locked is not None else False


class _MemoryStorage(_Sweep, AsyncMemoryStorage):
    """limits' async in-process storage with the inline sweep (:class:`_Sweep`): the
    fairness windows' store (:mod:`api.services.fairness`)."""

    async def _MemoryStorage__schedule_expiry(self) -> None:  # the base class's private hook
        self._maybe_sweep()


class _SyncMemoryStorage(_Sweep, SyncMemoryStorage):
    """limits' synchronous in-process storage with the inline sweep (:class:`_Sweep`): the
    rate limiter's store without Redis. A hit is a few list operations under an
    uncontended ``RLock``, called straight from the event loop (nothing in it waits), so
    it costs no coroutine and no ``asyncio.Lock``: measured with 2,000 entries a key,
    1.6 µs a hit against 5.1 µs for the async store."""

    def __init__(self, uri: str | None = None, **options: Any) -> None:
        super().__init__(uri, **options)
        self.timer.cancel()  # the base starts its sweep thread once here; ours runs inline
        self.timer.join()

    def _MemoryStorage__schedule_expiry(self) -> None:  # the base class's private hook
        self._maybe_sweep()


# limits' storage base classes wrap every storage method again for each subclass (to turn
# backend errors into StorageError when ``wrap_exceptions`` is on, which it is not here):
# _MemoryStorage's acquire_entry ran under four nested wrappers, ~3 µs of a request's
# ~23 µs in the limiter. Without wrap_exceptions a wrapper only re-raises, so the
# library's own function is called directly.
_MemoryStorage.acquire_entry = inspect.unwrap(AsyncMemoryStorage.acquire_entry)  # type: ignore[method-assign]
_SyncMemoryStorage.acquire_entry = inspect.unwrap(SyncMemoryStorage.acquire_entry)  # type: ignore[method-assign]


def _storage_uri(redis_url: str | None) -> str:
    if not redis_url:
        return "async+memory://"
    if redis_url.startswith("async+"):
        return redis_url
    if redis_url.startswith("unix://"):
        return "async+redis+unix://" + redis_url[len("unix://"):]
    return "async+" + redis_url


# Quota leasing (docs/decisions.md): a round trip to the window's store takes up to LEASE_MAX
# hits of a window at once, which this process serves for at most LEASE_S seconds.
LEASE_S = 1.0  # a lease's lifetime: its hits are served at most this long after the store recorded them
LEASE_MAX = 32  # hits per lease at most
LEASE_HEADROOM = 64  # a lease takes at most 1/64 of the window's remaining headroom
LEASE_TARGET_S = 1.0  # a lease is sized for this many seconds of the key's recent rate
RATE_HALF_LIFE_S = 1.0  # a key's rate estimate halves every second it is idle
RATE_MIN_S = 0.25  # the shortest interval a rate is measured over
# Prefetch (Redis only): every PREFETCH_S the leases of all busy keys that would run out
# before the next pass are refilled, many keys a round trip, so a busy key makes none of its own
PREFETCH_S = 0.25
PREFETCH_AHEAD_S = 1.5 * PREFETCH_S  # a lease due to run out within this is refilled
PREFETCH_CHUNK = 32  # keys per pipeline: a pipeline's packing and parsing run on the event loop

Answer = tuple[int, float]  # (remaining, reset as epoch seconds) from the window's store or the lease
Window = tuple[int, int, int]  # the X-RateLimit-Limit, -Remaining and -Reset of a request


class _Lease:
    """This process's lease on one window key: hits already recorded in the window's store
    (Redis: they count against the limit for every process), served to this process's
    requests until they run out or ``until`` passes (then the rest is wasted)."""

    __slots__ = ("demand", "fetched", "fetching", "item", "last", "left", "rate", "remaining", "reset", "rkey",
                 "spare", "spare_until", "until", "waiting")

    def __init__(self, rkey: str, item: RateLimitItem) -> None:
        self.rkey = rkey  # the key in the store (in Redis, limits' key with the storage's prefix)
        self.item = item  # the window's limit and length
        self.left = 0  # leased hits not yet served
        self.until = 0.0  # monotonic time the lease expires
        # a prefetched lease (Redis): served once ``left`` runs out or ``until`` passes;
        # it expires later than the current one (it was taken after it)
        self.spare = 0
        self.spare_until = 0.0
        self.last = 0.0  # monotonic time of the key's last request served from a lease
        self.remaining = 0  # the window's remaining in the store after the last round trip
        self.reset = 0.0  # the window's reset (epoch) from the last round trip
        self.fetched: float | None = None  # monotonic time of the last lease fetch
        self.demand = 0  # requests for the key since the last fetch
        self.rate = 0.0  # the key's recent request rate (per second), decaying while it is idle
        self.waiting = 0  # requests waiting for a round trip of the key
        # the round trip under way: its (accepted, remaining, reset), its error, or None if cancelled
        self.fetching: asyncio.Future[tuple[bool, int, float] | Exception | None] | None = None


class RateLimiter:
    """Moving-window per-minute limits per workspace (by plan) and per token.

    A window lives in limits' moving-window store: process memory, or Redis (``shared``)
    when every API process must share it. A round trip to the store records hits with
    ``acquire_entry`` and reads the window's remaining and reset with it (in Redis: limits'
    acquire script and window-stats script, pipelined into one call). With ``leases`` on,
    a key with headroom and steady demand takes several hits in that one call
    (:meth:`_lease_size`) and the next requests are served from the lease without a round
    trip. Leased hits are real entries of the window, so the sum never exceeds the limit
    (across processes too); near the limit every request is one exact hit. In process
    memory a round trip is a few µs and the lease saves that per request; in Redis it is
    a network call, so a task refills busy keys' leases ahead of need, many keys a round
    trip (:meth:`_prefetch`).
    """

    def __init__(self, *, redis_url: str | None, enabled: bool = True, leases: bool = True) -> None:
        self.enabled = enabled
        self.leasing = leases
        self.shared = bool(redis_url)
        # short timeouts: a hung Redis must not hang requests (they fail open instead)
        options: dict[str, Any] = (
            {"implementation": "redispy", "socket_timeout": 0.5, "socket_connect_timeout": 0.5} if redis_url else {}
        )
        storage: Any = None
        if redis_url:
            try:
                storage = storage_from_string(_storage_uri(redis_url), **options)
            except Exception as exc:  # a malformed URL: say so loudly, limit per process meanwhile
                log.error("WDS_REDIS_URL unusable (%s); rate limits are per process", exc)
                self.shared = False
        # the request windows in process memory: the synchronous store, called straight
        # from the event loop (_SyncMemoryStorage); ``strategy`` (async) holds them in a
        # shared store, and the other windows (app-user auth, chat) in either case
        self.local: SyncMovingWindowRateLimiter | None = (
            None if self.shared else SyncMovingWindowRateLimiter(_SyncMemoryStorage()))
        self.strategy = MovingWindowRateLimiter(storage if self.shared else _MemoryStorage())
        # limits' redis-py bridge (its client and registered scripts), for the one-round-trip
        # pipeline; None on another backend, which gets the library's two calls instead
        bridge = getattr(storage, "bridge", None) if self.shared else None
        self._bridge = bridge if hasattr(bridge, "lua_acquire_moving_window") else None
        self._items: dict[int, RateLimitItem] = {}
        self._keys: dict[tuple[int, str, int], str] = {}  # (amount, kind, id) → the library's key
        self._leases: dict[str, _Lease] = {}  # the library's key → this process's lease
        # Redis: the keys whose leases the prefetcher keeps filled, and its task
        self._busy: dict[str, _Lease] = {}
        self._prefetcher: asyncio.Task[None] | None = None
        self._warned = 0.0

    async def close(self) -> None:
        """Stop the prefetcher (its leases' unused hits are wasted, never over-admitted)."""
        task, self._prefetcher = self._prefetcher, None
        if task is not None and not task.done() and task.get_loop() is asyncio.get_running_loop():
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task

    def _item(self, amount: int) -> RateLimitItem:
        item = self._items.get(amount)
        if item is None:
            item = self._items[amount] = RateLimitItemPerMinute(amount)
        return item

    def _key(self, item: RateLimitItem, kind: str, ident: int) -> str:
        """The library's key for ``(item, kind, ident)``, built once (``key_for`` joins and
        escapes the identifiers on every call otherwise)."""
        cache = (item.amount, kind, ident)
        key = self._keys.get(cache)
        if key is None:
            if len(self._keys) > 100_000:
                self._keys.clear()
            key = self._keys[cache] = item.key_for(kind, str(ident))
        return key

    async def _count(self, item: RateLimitItem, kind: str, ident: int) -> tuple[bool, Answer]:
        """Count one request against ``item`` for ``(kind, ident)``: (accepted, the
        window's remaining and reset for the headers)."""
        key = self._key(item, kind, ident)
        st = self._leases.get(key)
        if st is not None and (hit := self._hit(st)) is not None:  # most requests: no coroutine, no store call
            st.demand += 1
        else:
            hit = await self._take(item, key)
        ok, remaining, reset = hit
        return ok, (remaining, reset)

    # ----------------------------------------------------------------- leases

    @staticmethod
    def _hit(st: _Lease) -> tuple[bool, int, float] | None:
        """The lease's next hit, while it has one and has not expired (``None`` otherwise;
        an expired lease's rest is wasted). The current lease is served first (it expires
        first), then the prefetched one."""
        now = time.monotonic()
        if st.left <= 0 or now >= st.until:
            if st.spare <= 0 or now >= st.spare_until:
                st.left = st.spare = 0
                return None
            st.left, st.until, st.spare = st.spare, st.spare_until, 0
        st.left -= 1
        st.last = now
        return True, st.remaining + st.left + st.spare, st.reset

    async def _take(self, item: RateLimitItem, key: str) -> tuple[bool, int, float]:
        """One request from the key's lease, or from the store when it has none left.

        One coroutine at a time makes a key's round trip; a request arriving meanwhile
        waits for it, then takes from the new lease, or is refused with it if it found the
        window full (it was read after the request arrived, so that answer is as exact as
        the request's own round trip would be), or waits for the next one. A failed round
        trip fails its waiters alike (they fail open, as it does). With leasing off every
        request makes its own round trip of one hit."""
        st = self._leases.get(key)
        if st is None:
            if len(self._leases) > 100_000:
                self._leases.clear()  # unused leased hits are wasted, never over-admitted
                self._busy.clear()
            st = self._leases[key] = _Lease(self._rkey(key), item)
        if not self.leasing:
            return await self._acquire(item, st.rkey, 1)
        st.demand += 1
        while True:
            hit = self._hit(st)
            if hit is not None:
                return hit
            fetch = st.fetching
            if fetch is None:
                return await self._fetch(item, st)
            st.waiting += 1
            try:
                outcome = await asyncio.shield(fetch)  # shielded: a waiter's cancellation must not cancel it
            finally:
                st.waiting -= 1
            if isinstance(outcome, Exception):
                raise outcome
            if outcome is not None and not outcome[0]:
                return outcome

    def _lease_size(self, item: RateLimitItem, st: _Lease, now: float) -> int:
        """How many hits the next round trip for ``st`` takes: the smallest of

        * :data:`LEASE_MAX` (32);
        * the window's remaining headroom // :data:`LEASE_HEADROOM` (64), so a lease is
          never more than 1/64 of what is left and, below 128 remaining, every request is
          one exact hit (the free plan's 60 always are);
        * the key's demand: its recent rate times :data:`LEASE_TARGET_S` (a lease's
          lifetime), or the requests already waiting for this round trip plus one if more.
          The rate is the requests since the last fetch over the time since (at least
          :data:`RATE_MIN_S`, so two requests close together do not read as a flood),
          or the previous estimate halved for every idle :data:`RATE_HALF_LIFE_S` if
          higher. A key with a few requests a second takes one or two hits at a time; a
          busy one grows its leases about fourfold a round trip up to 32.

        1 (exact) for a key's first request or with leasing off.
        """
        if not self.leasing or st.fetched is None:
            return 1
        st.rate = self._rate(st, now)
        want = max(st.waiting + 1, math.ceil(st.rate * LEASE_TARGET_S))
        return max(1, min(LEASE_MAX, st.remaining // LEASE_HEADROOM, want))

    @staticmethod
    def _rate(st: _Lease, now: float) -> float:
        """The key's request rate (:meth:`_lease_size`): the requests since the last fetch
        over the time since (at least :data:`RATE_MIN_S`), or the previous estimate halved
        for every idle :data:`RATE_HALF_LIFE_S` if higher."""
        elapsed = now - (st.fetched or now)
        return max(st.demand / max(elapsed, RATE_MIN_S), st.rate * 0.5 ** (elapsed / RATE_HALF_LIFE_S))

    async def _fetch(self, item: RateLimitItem, st: _Lease) -> tuple[bool, int, float]:
        """Take a lease for ``st`` (the caller's request uses its first hit)."""
        started = time.monotonic()
        size = self._lease_size(item, st, started)
        st.demand, st.fetched = 0, started
        if size > 1 and self._bridge is not None:  # a busy key: the prefetcher refills it from now on
            st.last = started
            self._busy[st.rkey] = st
            self._start_prefetcher()
        fetch = st.fetching = asyncio.get_running_loop().create_future()
        try:
            ok, remaining, reset = await self._acquire(item, st.rkey, size)
            if not ok and size > 1 and remaining > 0:  # the lease did not fit, one hit may
                size = 1
                ok, remaining, reset = await self._acquire(item, st.rkey, 1)
        except BaseException as exc:
            st.fetching = None
            # waiters fail open with the same error; after a cancellation they try themselves
            fetch.set_result(exc if isinstance(exc, Exception) else None)
            raise
        st.remaining, st.reset = remaining, reset
        if ok:
            # counted from before the round trip: no leased hit is served later than
            # LEASE_S after the timestamp Redis recorded for it
            st.left, st.until = size - 1, started + LEASE_S
        st.fetching = None
        fetch.set_result((ok, remaining, reset))
        return ok, remaining + st.left, reset

    def _rkey(self, key: str) -> str:
        return self._bridge.prefixed_key(key) if self._bridge is not None else key

    async def _acquire(self, item: RateLimitItem, rkey: str, amount: int, *,
                       retry: bool = True) -> tuple[bool, int, float]:
        """Record ``amount`` hits in the shared window if they all fit, and read the window:
        (acquired, remaining, reset). limits' own ``acquire_entry(key, limit, expiry,
        amount)`` and ``get_moving_window`` with the library's arguments: in process memory
        two calls that never wait; in Redis one round trip, the acquire script and the
        window-stats script pipelined."""
        limit, expiry = item.amount, item.get_expiry()
        if self.local is not None:  # process memory
            store: Any = self.local.storage
            acquired = store.acquire_entry(rkey, limit, expiry, amount)
            start, count = store.get_moving_window(rkey, limit, expiry)
            return bool(acquired), limit - count, start + expiry
        bridge = self._bridge
        if bridge is None:  # not limits' redis-py bridge: the library's two calls
            storage: Any = self.strategy.storage
            acquired = await storage.acquire_entry(rkey, limit, expiry, amount)
            start, count = await storage.get_moving_window(rkey, limit, expiry)
            return bool(acquired), limit - count, start + expiry
        now = time.time()
        pipe = bridge.get_connection().pipeline(transaction=False)
        self._queue(pipe, item, rkey, now, amount)
        acquired, window = await pipe.execute(raise_on_error=False)
        if isinstance(acquired, NoScriptError) and retry:  # a fresh or flushed Redis: load, once
            await self._load_scripts()
            return await self._acquire(item, rkey, amount, retry=False)
        if isinstance(acquired, Exception):
            raise acquired
        if isinstance(window, Exception):  # the hit is recorded; read the window on its own
            if not isinstance(window, NoScriptError):
                raise window
            window = await bridge.lua_moving_window([rkey], [time.time() - expiry, limit])  # loads it
        return self._answer(item, acquired, window, now)

    def _queue(self, pipe: Any, item: RateLimitItem, rkey: str, now: float, amount: int) -> None:
        """Add one round trip's commands to ``pipe``: limits' moving-window acquire script
        for ``amount`` hits and its window-stats script, with the library's arguments."""
        bridge: Any = self._bridge
        limit, expiry = item.amount, item.get_expiry()
        pipe.evalsha(bridge.lua_acquire_moving_window.sha, 1, rkey, now, limit, expiry, amount)
        pipe.evalsha(bridge.lua_moving_window.sha, 1, rkey, now - expiry, limit)

    @staticmethod
    def _answer(item: RateLimitItem, acquired: Any, window: Any, now: float) -> tuple[bool, int, float]:
        """(acquired, remaining, reset) from the two scripts' replies (:meth:`_queue`)."""
        limit, expiry = item.amount, item.get_expiry()
        if window:
            return bool(acquired), limit - int(window[1]), float(window[0]) + expiry
        return bool(acquired), limit, now + expiry

    # ----------------------------------------------------------------- prefetch (Redis)

    def _start_prefetcher(self) -> None:
        loop = asyncio.get_running_loop()
        task = self._prefetcher
        if task is None or task.done() or task.get_loop() is not loop:
            self._prefetcher = loop.create_task(self._prefetch_loop(), name="wds-limits-prefetch")

    async def _prefetch_loop(self) -> None:
        """Every :data:`PREFETCH_S`, refill the busy keys' leases that are due
        (:meth:`_prefetch`); ends when no key is busy (the next busy key's round trip starts
        it again)."""
        while self._busy:
            await asyncio.sleep(PREFETCH_S)
            try:
                await self._prefetch(time.monotonic())
            except Exception as exc:  # Redis down: the keys' own round trips fail open and log
                self._warn(exc)

    def _due(self, now: float) -> list[tuple[_Lease, int]]:
        """The busy keys whose lease runs out (by count at the key's rate, or by time)
        within :data:`PREFETCH_AHEAD_S`, each with the size of its next lease: the key's
        demand over the part of :data:`LEASE_S` it will serve (from at most
        ``PREFETCH_AHEAD_S`` after the round trip), within the bounds of
        :meth:`_lease_size`. A key with no request since the last pass leaves the busy
        set (its lease lapses; its next round trip is its own); one with a round trip under
        way, a prefetched lease still unserved, or a lease of fewer than 2 hits due (near
        its limit, or slow) is skipped."""
        due: list[tuple[_Lease, int]] = []
        for rkey, st in list(self._busy.items()):
            if now - st.last > PREFETCH_S:
                del self._busy[rkey]
                continue
            if st.fetching is not None or st.spare > 0 or st.fetched is None:
                continue
            rate = self._rate(st, now)
            left = st.left if now < st.until else 0
            if left > rate * PREFETCH_AHEAD_S and st.until - now > PREFETCH_AHEAD_S:
                continue
            size = min(LEASE_MAX, st.remaining // LEASE_HEADROOM, math.ceil(rate * (LEASE_S - PREFETCH_AHEAD_S)))
            if size >= 2:
                st.rate = rate
                due.append((st, size))
        return due

    async def _prefetch(self, now: float) -> None:
        """Refill every due key (:meth:`_due`), :data:`PREFETCH_CHUNK` keys a round trip."""
        due = self._due(now)
        for start in range(0, len(due), PREFETCH_CHUNK):
            await self._refill(due[start:start + PREFETCH_CHUNK])

    async def _refill(self, due: list[tuple[_Lease, int]]) -> None:
        """One round trip for ``due``: each key takes its next lease with limits' two
        scripts, as :meth:`_acquire` does, all in one pipeline. The new lease is kept beside
        the current one (``spare``) and served when that runs out; it expires
        :data:`LEASE_S` after the round trip started. Requests that find the key's lease
        empty meanwhile wait for this round trip as for a key's own. A lease that no longer
        fits the window is not taken: its waiters make their own (exact) round trip. A key
        that started its own round trip since it was found due is left out."""
        due = [(st, size) for st, size in due if st.fetching is None]
        if not due:
            return
        loop = asyncio.get_running_loop()
        now, clock = time.monotonic(), time.time()
        pipe: Any = self._bridge.get_connection().pipeline(transaction=False)
        for st, size in due:
            self._queue(pipe, st.item, st.rkey, clock, size)
            st.demand, st.fetched = 0, now
            st.fetching = loop.create_future()
        try:
            replies = await pipe.execute(raise_on_error=False)
        except BaseException as exc:
            for st, _ in due:
                fetch, st.fetching = st.fetching, None
                if fetch is not None:  # waiters fail open with the error, after a cancellation try themselves
                    fetch.set_result(exc if isinstance(exc, Exception) else None)
            raise
        reload = False
        for i, (st, size) in enumerate(due):
            fetch, st.fetching = st.fetching, None
            acquired, window = replies[2 * i], replies[2 * i + 1]
            outcome: tuple[bool, int, float] | Exception | None = None
            if isinstance(acquired, NoScriptError):
                reload = True  # a fresh or flushed Redis: nothing taken, the waiters try themselves
            elif isinstance(acquired, Exception):
                outcome = acquired
            else:
                if isinstance(window, Exception):  # the hits are recorded, the stats are not
                    ok, remaining, reset = bool(acquired), max(0, st.remaining - size), st.reset
                else:
                    ok, remaining, reset = self._answer(st.item, acquired, window, clock)
                st.remaining, st.reset = remaining, reset
                if ok:
                    st.spare, st.spare_until = size, now + LEASE_S
                    outcome = (True, remaining, reset)
            if fetch is not None:
                fetch.set_result(outcome)
        if reload:
            await self._load_scripts()

    def _warn(self, exc: Exception) -> None:
        if time.monotonic() - self._warned > 30:
            self._warned = time.monotonic()
            log.warning("rate limiter unavailable, requests pass unlimited: %s", exc)

    async def _load_scripts(self) -> None:
        bridge: Any = self._bridge
        conn = bridge.get_connection()
        for script in (bridge.lua_acquire_moving_window, bridge.lua_moving_window):
            script.sha = await conn.script_load(script.script)

    # ----------------------------------------------------------------- headers

    @staticmethod
    def _window(item: RateLimitItem, answer: Answer) -> Window:
        """The X-RateLimit-* values from the answer of the request's own round trip or
        lease: the store's remaining after it plus this process's unused leased hits (which
        are the window's, already counted in the store), and the seconds until its oldest
        hit leaves the window."""
        remaining, reset = answer
        wait = math.ceil(reset - time.time())
        return item.amount, remaining if remaining > 0 else 0, wait if wait > 0 else 0

    def _refuse(self, item: RateLimitItem, message: str, code: str, *, answer: Answer,
                upgrade: bool) -> RateLimited:
        headers = limit_headers(self._window(item, answer))
        headers["Retry-After"] = str(max(1, int(headers["X-RateLimit-Reset"])))
        headers["X-RateLimit-Remaining"] = "0"
        return RateLimited(message, code=code, headers=headers, extra={"upgrade": True} if upgrade else None)

    async def check(self, principal: Principal) -> dict[str, str]:
        """Count one request of ``principal``; returns the rate-limit headers.

        Raises:
            RateLimited: 429 ``PLAN_RATE_LIMIT_API`` or ``TOKEN_RATE_LIMIT``.
        """
        return limit_headers(await self.count(principal))

    async def count(self, principal: Principal) -> Window | None:
        """Count one request of ``principal``; returns the values of its rate-limit headers
        (``None``: rate limits are off, or the shared store is down).

        Raises:
            RateLimited: 429 ``PLAN_RATE_LIMIT_API`` or ``TOKEN_RATE_LIMIT``.
        """
        if not self.enabled:
            return None
        per_ws = plan_of(principal.plan).requests_per_minute
        ws_item = self._item(per_ws) if per_ws is not None else None
        tok_item = self._item(TOKEN_REQUESTS_PER_MINUTE)
        try:
            # the workspace first: a request it refuses does not use the token's budget
            ws_answer: Answer | None = None
            if ws_item is not None:
                ok, ws_answer = await self._count(ws_item, "ws", principal.workspace_id)
                if not ok:
                    raise self._refuse(
                        ws_item, f"the {principal.plan} plan allows {per_ws:,} requests per minute "
                        "for the workspace; retry after the Retry-After seconds or upgrade the plan",
                        "PLAN_RATE_LIMIT_API", answer=ws_answer, upgrade=True,
                    )
            ok, tok_answer = await self._count(tok_item, "tok", principal.token_id)
            if not ok:
                raise self._refuse(
                    tok_item, f"a token may make at most {TOKEN_REQUESTS_PER_MINUTE:,} requests "
                    "per minute; retry after the Retry-After seconds", "TOKEN_RATE_LIMIT", answer=tok_answer,
                    upgrade=False,
                )
            if ws_answer is not None and ws_item is not None and ws_item.amount <= tok_item.amount:
                return self._window(ws_item, ws_answer)
            return self._window(tok_item, tok_answer)
        except RateLimited:
            raise
        except Exception as exc:  # the shared store is down: keep serving, say so in the log
            self._warn(exc)
            return None


def limit_headers(window: Window | None) -> dict[str, str]:
    """The ``X-RateLimit-*`` headers of :meth:`RateLimiter.count`'s answer."""
    if window is None:
        return {}
    limit, remaining, reset = window
    return {"X-RateLimit-Limit": str(limit), "X-RateLimit-Remaining": str(remaining), "X-RateLimit-Reset": str(reset)}


def header_pairs(window: Window) -> tuple[tuple[bytes, bytes], ...]:
    """:meth:`RateLimiter.count`'s answer as the ASGI response headers (names lower case)."""
    limit, remaining, reset = window
    return ((b"x-ratelimit-limit", b"%d" % limit), (b"x-ratelimit-remaining", b"%d" % remaining),
            (b"x-ratelimit-reset", b"%d" % reset))


# --------------------------------------------------------------------------- runtime


def clock_of(settings: Settings) -> Callable[[], datetime]:
    """The clock quotas read their month from: the real UTC time, or — in dev mode only,
    for tests of the month rollover — ``WDS_CLOCK_OVERRIDE`` (an ISO date or datetime)
    moving forward from process start."""
    raw = getattr(settings, "clock_override", None) or os.environ.get("WDS_CLOCK_OVERRIDE")

    def real() -> datetime:
        return datetime.now(timezone.utc)

    if not raw:
        return real
    if not settings.dev_mode:
        log.warning("WDS_CLOCK_OVERRIDE is ignored outside dev mode")
        return real
    try:
        start = datetime.fromisoformat(raw)
    except ValueError:
        log.error("WDS_CLOCK_OVERRIDE=%r is not an ISO date; using the real clock", raw)
        return real
    if start.tzinfo is None:
        start = start.replace(tzinfo=timezone.utc)
    t0 = time.monotonic()
    return lambda: start + timedelta(seconds=time.monotonic() - t0)


def _nothing() -> None:
    pass


class WorkspaceGate:
    """Each tenant's fair share of this process: at most ``size`` requests of one workspace
    run at once; the others wait their turn, first come first served.

    Rate limits bound how many requests a tenant makes a minute; this bounds how many of
    them interleave on the event loop at once, which is what another tenant's latency
    depends on (every await of its request queues behind the callbacks of all running
    requests). A request waiting longer than ``wait_s`` is answered 503 ``WORKSPACE_BUSY``
    with ``Retry-After`` and has changed nothing.
    """

    def __init__(self, size: int, wait_s: float, fairness: RunFairness | None = None) -> None:
        self.size = size
        self.wait_s = wait_s
        self._slots = KeyedSlots(size)
        self._fairness = fairness  # told of every gated request: who else is active

    async def acquire(self, workspace_id: int) -> Callable[[], None]:
        """Take one of the workspace's slots; call what is returned to give it back.

        Raises:
            Unavailable: 503 ``WORKSPACE_BUSY`` when no slot came free in time.
        """
        if self._fairness is not None:
            self._fairness.note(workspace_id)
        if self.size <= 0:
            return _nothing
        try:
            return await self._slots.take(workspace_id, self.wait_s)
        except TimeoutError:
            raise Unavailable(
                f"this workspace already has {self.size} requests running and more waiting; retry shortly",
                code="WORKSPACE_BUSY", headers={"Retry-After": "1"}) from None

    def running(self, workspace_id: int) -> int:
        """How many of the workspace's requests hold a slot now (for tests and metrics)."""
        return self._slots.held(workspace_id)


@dataclass
class Runtime:
    limiter: RateLimiter
    quotas: QuotaBook
    usage: UsageBuffer
    gate: WorkspaceGate
    fairness: RunFairness
    task: asyncio.Task[None] | None = None


def runtime(state: AppState) -> Runtime:
    """This process's limiter, quota book and usage buffer (made, and flushing, on first use)."""
    rt: Runtime | None = state.extras.get("limits")
    if rt is None:
        s = state.settings
        fairness = RunFairness(s.fair_pipeline_runs_per_s, s.fair_cpu_pressure, _MemoryStorage(),
                               heavy_runs_per_s=s.fair_heavy_runs_per_s)
        rt = Runtime(
            limiter=RateLimiter(redis_url=s.redis_url, enabled=s.rate_limits, leases=s.rate_limit_leases),
            quotas=QuotaBook(state.db, clock=clock_of(s)),
            usage=UsageBuffer(),
            gate=WorkspaceGate(s.requests_in_flight_per_workspace, s.request_queue_timeout_s, fairness),
            fairness=fairness,
        )
        state.extras["limits"] = rt
    if rt.task is None:
        rt.task = asyncio.get_running_loop().create_task(_flush_loop(state, rt), name="wds-limits-flush")
    return rt


async def _flush_loop(state: AppState, rt: Runtime) -> None:
    while True:
        await asyncio.sleep(FLUSH_S)
        await flush(state, rt)


async def flush(state: AppState, rt: Runtime | None = None) -> None:
    """Write queued usage rows and quota increments now (never raises)."""
    rt = rt or runtime(state)
    with suppress(Exception):
        await rt.usage.flush(state.db)
    with suppress(Exception):
        await rt.quotas.flush()


async def stop(state: AppState) -> None:
    """Stop the flush loop and write what is queued (call before the pool closes)."""
    rt: Runtime | None = state.extras.get("limits")
    if rt is None:
        return
    if rt.task is not None:
        rt.task.cancel()
        with suppress(asyncio.CancelledError, Exception):
            await rt.task
        rt.task = None
    await rt.fairness.close()
    await rt.limiter.close()
    with suppress(Exception):
        await asyncio.wait_for(flush(state, rt), timeout=5)


# --------------------------------------------------------------------------- entry points


async def enforce_limits(
    state: AppState, principal: Principal, door: str, *, scope: MutableMapping[str, Any] | None = None
) -> None:
    """Apply rate limits and the monthly API-request quota to one call through ``door``.

    With ``scope``, the values of the ``X-RateLimit-*`` headers (:data:`Window`) are
    stashed for the front layer to add to the response (none when rate limits are off).

    Raises:
        RateLimited: 429 ``PLAN_RATE_LIMIT_API`` / ``TOKEN_RATE_LIMIT`` with ``Retry-After``.
        PlanLimit: 402 ``PLAN_LIMIT_API_REQUESTS`` (carrying the rate-limit headers).
    """
    st: dict[str, Any] | None = None
    if scope is not None:
        st = scope.setdefault("state", {})
        if st.get(DONE_KEY):
            return
        st[DONE_KEY] = True
        st[PRINCIPAL_KEY] = principal
        st["wds_door"] = door
    rt = runtime(state)
    window = await rt.limiter.count(principal)
    try:
        await rt.quotas.charge(principal.workspace_id, principal.plan, q.API_REQUESTS)
    except PlanLimit as exc:
        exc.headers.update(limit_headers(window))
        raise
    if st is not None and window is not None:
        st[HEADERS_KEY] = window


async def charge_automation_runs(state: AppState, principal: Principal, runs: int) -> int:
    """Count ``runs`` automation runs (one per record a pipeline runs for).

    Returns the runs paid as AI credits under auto-recharge. Raises 402
    ``PLAN_LIMIT_AUTOMATION_RUNS`` (nothing counted) when the month's runs are used up.
    """
    return await runtime(state).quotas.charge(principal.workspace_id, principal.plan, q.AUTOMATION_RUNS, runs)


async def check_table_quota(state: AppState, principal: Principal, conn: psycopg.AsyncConnection[Any]) -> None:
    """402 ``PLAN_LIMIT_TABLES`` if one more table does not fit the plan.

    Call inside the table-creating transaction that holds the workspace's schema lock,
    so two concurrent creations cannot both take the last slot.
    """
    p = plan_of(principal.plan)
    if p.tables is None:
        return
    book = runtime(state).quotas
    await book.ensure_flags(principal.workspace_id)
    used = await q.table_count(conn, workspace_id=principal.workspace_id)
    excess = q.decide(p, q.TABLES, used=used, adding=1, auto_recharge=book.auto_recharge(principal.workspace_id))
    if excess:
        book.add_excess(principal.workspace_id, excess)


async def check_storage_quota(
    state: AppState, principal: Principal, adding_bytes: int, *, used_bytes: int | None = None
) -> None:
    """402 ``PLAN_LIMIT_STORAGE`` if ``adding_bytes`` more do not fit the plan's storage.

    ``used_bytes`` is the workspace's current total when the caller knows it; otherwise it
    is summed from ``wds.objects``. Under auto-recharge the bytes past the quota are
    recorded as excess (in MiB, rounded up) instead.
    """
    p = plan_of(principal.plan)
    if p.storage_bytes is None:
        return
    book = runtime(state).quotas
    await book.ensure_flags(principal.workspace_id)
    if used_bytes is None:
        async with state.db.connection() as conn:
            used_bytes = await q.storage_bytes(conn, workspace_id=principal.workspace_id)
    excess = q.decide(p, q.STORAGE, used=used_bytes, adding=adding_bytes,
                      auto_recharge=book.auto_recharge(principal.workspace_id))
    if excess:
        book.add_excess(principal.workspace_id, math.ceil(excess / (1024 * 1024)))


async def charge_builds(state: AppState, principal: Principal, builds: int = 1) -> int:
    """Count a publish (build); 402 ``PLAN_LIMIT_BUILDS`` when the month's builds are used up."""
    return await runtime(state).quotas.charge(principal.workspace_id, principal.plan, q.BUILDS, builds)


async def check_ai_credits(state: AppState, principal: Principal, credits: int = 1) -> None:
    """402 ``PLAN_LIMIT_AI_CREDITS`` before AI work if ``credits`` more would not fit."""
    await runtime(state).quotas.check(principal.workspace_id, principal.plan, q.AI_CREDITS, credits)


async def charge_ai_credits(state: AppState, principal: Principal, credits: int) -> int:
    """Count AI credits spent; 402 ``PLAN_LIMIT_AI_CREDITS`` (nothing counted) past the quota."""
    return await runtime(state).quotas.charge(principal.workspace_id, principal.plan, q.AI_CREDITS, credits)


def note_workspace(state: AppState, workspace_id: int, *, auto_recharge: bool) -> None:
    """Apply a workspace's changed ``auto_recharge`` in this process at once (admin PATCH);
    other processes pick it up at their next refresh (a few seconds)."""
    rt: Runtime | None = state.extras.get("limits")
    if rt is not None:
        rt.quotas.note_workspace(workspace_id, auto_recharge=auto_recharge)
