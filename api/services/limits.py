"""Plan limits for every door: per-minute rate limits, monthly quotas, plan ceilings.

One entry point for every door — REST, SQL, MCP and chat::

    headers = await enforce_limits(state, principal, door, scope=request.scope)

It runs after the caller's token is resolved, and in this order:

1. **Rate limits** (``limits`` library, moving 60-second window — at most N requests in
   any 60 seconds, not a refilling bucket): per workspace by plan (``Plan.requests_per_minute``,
   60 / 600 / 3,000 / 10,000 / unlimited) → 429 ``PLAN_RATE_LIMIT_API`` with ``upgrade:
   true``; per token ``TOKEN_REQUESTS_PER_MINUTE`` (3,000) on every plan → 429
   ``TOKEN_RATE_LIMIT``. Both answer ``Retry-After``: the seconds until the oldest request
   of the full window leaves it, i.e. until a request would be accepted. With
   ``WDS_REDIS_URL`` the windows live in Redis and every API process shares them; without
   it they are in this process's memory (correct for a single API process only).
   ``WDS_RATE_LIMITS=false`` turns rate limits off (quotas stay on). If Redis fails,
   requests are let through (logged): the data stays available.
2. **The monthly API-request quota** (:mod:`storage.quotas`) → 402
   ``PLAN_LIMIT_API_REQUESTS`` with ``upgrade: true``; counted in memory, written once a
   second, no database round trip per request.

It returns the ``X-RateLimit-Limit/-Remaining/-Reset`` headers (``Reset``: seconds until a
slot frees). The limit reported is the one that binds a single token first (the plan's,
or the token ceiling when that is lower or the plan is unlimited). When ``scope`` is
given, the principal and the headers are also stashed in it so the usage middleware
(:mod:`api.middleware.usage`) adds the headers to the response and logs the call under the
workspace and token; a second call for the same request is a no-op, so a door may call
it even where the middleware already did.

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
from limits.storage import storage_from_string

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


class _MemoryStorage(AsyncMemoryStorage):
    """limits' async in-process storage, sweeping expired window entries inline, at most
    once a second.

    The library's own sweep (``__expire_events``) is scheduled again after every hit and
    hops to a thread (``asyncio.to_thread``) for a bisect on every key, so under load the
    event loop serves a constant stream of thread hand-offs: measured, it cost GETs with
    limits on ~18 % of their throughput. The sweep only frees memory; whether a hit fits
    the window is decided from the entries' timestamps (``acquire_entry``), so doing it
    less often changes no answer.
    """

    SWEEP_EVERY_S = 1.0

    def __init__(self, uri: str | None = None, **options: Any) -> None:
        super().__init__(uri, **options)
        self._swept = 0.0

    async def _MemoryStorage__schedule_expiry(self) -> None:  # the base class's private hook
        now = time.monotonic()
        if now - self._swept < self.SWEEP_EVERY_S:
            return
        self._swept = now
        self._sweep(time.time())

    def _sweep(self, now: float) -> None:
        # no await inside: atomic on the event loop, as the base's locks would make it
        for key in list(self.events):
            events = self.events[key]
            keep = bisect.bisect_left(events, -now, key=lambda entry: -entry.expiry)
            if keep:
                self.events[key] = events[:keep]
            else:
                self.events.pop(key, None)
                if not self.locks[key].locked():
                    self.locks.pop(key, None)
        for key, expires in list(self.expirations.items()):
            if expires <= now:
                self.storage.pop(key, None)
                self.expirations.pop(key, None)


# limits' storage base classes wrap every storage method again for each subclass (to turn
# backend errors into StorageError when ``wrap_exceptions`` is on, which it is not here):
# _MemoryStorage's acquire_entry ran under four nested wrappers, ~3 µs of a request's
# ~23 µs in the limiter. Without wrap_exceptions a wrapper only re-raises, so the
# library's own function is called directly.
_MemoryStorage.acquire_entry = inspect.unwrap(AsyncMemoryStorage.acquire_entry)  # type: ignore[method-assign]


def _storage_uri(redis_url: str | None) -> str:
    if not redis_url:
        return "async+memory://"
    if redis_url.startswith("async+"):
        return redis_url
    if redis_url.startswith("unix://"):
        return "async+redis+unix://" + redis_url[len("unix://"):]
    return "async+" + redis_url


STATS_TTL_S = 1.0  # how long window stats for the headers are reused


class RateLimiter:
    """Moving-window per-minute limits per workspace (by plan) and per token."""

    def __init__(self, *, redis_url: str | None, enabled: bool = True) -> None:
        self.enabled = enabled
        self.shared = bool(redis_url)
        # short timeouts: a hung Redis must not hang requests (they fail open instead)
        options: dict[str, Any] = (
            {"implementation": "redispy", "socket_timeout": 0.5, "socket_connect_timeout": 0.5} if redis_url else {}
        )
        storage: Any
        try:
            storage = storage_from_string(_storage_uri(redis_url), **options) if redis_url else _MemoryStorage()
        except Exception as exc:  # a malformed URL: say so loudly, limit per process meanwhile
            log.error("WDS_REDIS_URL unusable (%s); rate limits are per process", exc)
            storage, self.shared = _MemoryStorage(), False
        self.strategy = MovingWindowRateLimiter(storage)
        self._items: dict[int, RateLimitItem] = {}
        self._keys: dict[tuple[int, str, int], str] = {}  # (amount, kind, id) → the library's key
        self._stats: dict[tuple[Any, ...], list[Any]] = {}  # key → [read at, remaining, reset, hits since]
        self._warned = 0.0

    def _item(self, amount: int) -> RateLimitItem:
        item = self._items.get(amount)
        if item is None:
            item = self._items[amount] = RateLimitItemPerMinute(amount)
        return item

    async def _hit(self, item: RateLimitItem, kind: str, ident: int) -> bool:
        """``strategy.hit(item, kind, str(ident))``, with the library's key for it built
        once (``key_for`` joins and escapes the identifiers on every call otherwise)."""
        cache = (item.amount, kind, ident)
        key = self._keys.get(cache)
        if key is None:
            if len(self._keys) > 100_000:
                self._keys.clear()
            key = self._keys[cache] = item.key_for(kind, str(ident))
        # exactly MovingWindowRateLimiter.hit, given the key
        return await self.strategy.storage.acquire_entry(key, item.amount, item.get_expiry())  # type: ignore[attr-defined, no-any-return]

    async def _headers(self, item: RateLimitItem, kind: str, ident: int, fresh: bool = False) -> dict[str, str]:
        """The X-RateLimit-* headers. In process memory the window's stats cost a scan of
        every request in the window, so they are read at most once a second per key and
        this process's hits are counted down in between, which is exact since no other
        process shares that store. With Redis (shared) they are read every time.
        Enforcement itself (``hit``) is always exact."""
        key = (item.amount, kind, ident)
        now = time.monotonic()
        cached = self._stats.get(key)
        if fresh or self.shared or cached is None or now - cached[0] >= STATS_TTL_S:
            stats = await self.strategy.get_window_stats(item, kind, str(ident))
            cached = [now, max(0, stats.remaining), stats.reset_time, 0]
            if len(self._stats) > 100_000:
                self._stats.clear()
            self._stats[key] = cached
        else:
            cached[3] += 1
        remaining = cached[1] - cached[3]
        wait = math.ceil(cached[2] - time.time())
        return {"X-RateLimit-Limit": str(item.amount), "X-RateLimit-Remaining": str(remaining) if remaining > 0 else "0",
                "X-RateLimit-Reset": str(wait) if wait > 0 else "0"}

    async def _refuse(self, item: RateLimitItem, ident: tuple[str, int], message: str, code: str,
                      upgrade: bool) -> RateLimited:
        headers = await self._headers(item, *ident, fresh=True)
        headers["Retry-After"] = str(max(1, int(headers["X-RateLimit-Reset"])))
        headers["X-RateLimit-Remaining"] = "0"
        return RateLimited(message, code=code, headers=headers, extra={"upgrade": True} if upgrade else None)

    async def check(self, principal: Principal) -> dict[str, str]:
        """Count one request of ``principal``; returns the rate-limit headers.

        Raises:
            RateLimited: 429 ``PLAN_RATE_LIMIT_API`` or ``TOKEN_RATE_LIMIT``.
        """
        if not self.enabled:
            return {}
        per_ws = plan_of(principal.plan).requests_per_minute
        ws_item = self._item(per_ws) if per_ws is not None else None
        tok_item = self._item(TOKEN_REQUESTS_PER_MINUTE)
        ws_id = ("ws", principal.workspace_id)
        tok_id = ("tok", principal.token_id)
        try:
            # the workspace first: a request it refuses does not use the token's budget
            if ws_item is not None and not await self._hit(ws_item, "ws", principal.workspace_id):
                raise await self._refuse(
                    ws_item, ws_id, f"the {principal.plan} plan allows {per_ws:,} requests per minute "
                    "for the workspace; retry after the Retry-After seconds or upgrade the plan",
                    "PLAN_RATE_LIMIT_API", upgrade=True,
                )
            if not await self._hit(tok_item, "tok", principal.token_id):
                raise await self._refuse(
                    tok_item, tok_id, f"a token may make at most {TOKEN_REQUESTS_PER_MINUTE:,} requests "
                    "per minute; retry after the Retry-After seconds", "TOKEN_RATE_LIMIT", upgrade=False,
                )
            if ws_item is not None and ws_item.amount <= tok_item.amount:
                return await self._headers(ws_item, *ws_id)
            return await self._headers(tok_item, *tok_id)
        except RateLimited:
            raise
        except Exception as exc:  # the shared store is down: keep serving, say so in the log
            if time.monotonic() - self._warned > 30:
                self._warned = time.monotonic()
                log.warning("rate limiter unavailable, requests pass unlimited: %s", exc)
            return {}


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

    def __init__(self, size: int, wait_s: float) -> None:
        self.size = size
        self.wait_s = wait_s
        self._slots = KeyedSlots(size)

    async def acquire(self, workspace_id: int) -> Callable[[], None]:
        """Take one of the workspace's slots; call what is returned to give it back.

        Raises:
            Unavailable: 503 ``WORKSPACE_BUSY`` when no slot came free in time.
        """
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
    task: asyncio.Task[None] | None = None


def runtime(state: AppState) -> Runtime:
    """This process's limiter, quota book and usage buffer (made, and flushing, on first use)."""
    rt: Runtime | None = state.extras.get("limits")
    if rt is None:
        s = state.settings
        rt = Runtime(
            limiter=RateLimiter(redis_url=s.redis_url, enabled=s.rate_limits),
            quotas=QuotaBook(state.db, clock=clock_of(s)),
            usage=UsageBuffer(),
            gate=WorkspaceGate(s.requests_in_flight_per_workspace, s.request_queue_timeout_s),
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
    with suppress(Exception):
        await asyncio.wait_for(flush(state, rt), timeout=5)


# --------------------------------------------------------------------------- entry points


async def enforce_limits(
    state: AppState, principal: Principal, door: str, *, scope: MutableMapping[str, Any] | None = None
) -> dict[str, str]:
    """Apply rate limits and the monthly API-request quota to one call through ``door``.

    Returns the ``X-RateLimit-*`` headers (empty when rate limits are off).

    Raises:
        RateLimited: 429 ``PLAN_RATE_LIMIT_API`` / ``TOKEN_RATE_LIMIT`` with ``Retry-After``.
        PlanLimit: 402 ``PLAN_LIMIT_API_REQUESTS`` (carrying the rate-limit headers).
    """
    st: dict[str, Any] | None = None
    if scope is not None:
        st = scope.setdefault("state", {})
        if st.get(DONE_KEY):
            return st.get(HEADERS_KEY) or {}
        st[DONE_KEY] = True
        st[PRINCIPAL_KEY] = principal
        st["wds_door"] = door
    rt = runtime(state)
    headers = await rt.limiter.check(principal)
    try:
        await rt.quotas.charge(principal.workspace_id, principal.plan, q.API_REQUESTS)
    except PlanLimit as exc:
        exc.headers.update(headers)
        raise
    if st is not None and headers:
        st[HEADERS_KEY] = headers
    return headers


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
