"""Quota leasing with the in-process store (no ``WDS_REDIS_URL``): a call to limits' store
takes several hits of a busy window at once and the next requests are served from the
lease, as with Redis; the window holds a real entry for every admitted request, the
headers count down exactly, and near the limit every request is one exact hit.

The store is limits' own; what is read here is its window (``events``: one list per key,
newest first; a lease of K hits is K references to one ``Entry``), so the number of
distinct entries is the number of calls the limiter made to the store."""

from __future__ import annotations

import asyncio
import secrets

from api.services.limits import LEASE_MAX, LEASE_S, RateLimiter
from storage.access import Principal, TokenType
from storage.errors import RateLimited


def _principal(plan: str) -> Principal:
    ident = 10**9 + secrets.randbelow(10**9)
    return Principal(token_id=ident, workspace_id=ident, type=TokenType.VIBE_MCP, profile_id=None, plan=plan,
                     read_only=False, expires_at=None)


def _window(limiter: RateLimiter, kind: str, ident: int, amount: int) -> list[object]:
    """The entries limits' in-process store holds for one window."""
    assert limiter.local is not None
    store = limiter.local.storage
    return list(store.events.get(limiter._key(limiter._item(amount), kind, ident), []))  # type: ignore[attr-defined]


async def test_a_busy_window_is_leased_and_every_admit_is_an_entry_of_it():
    limiter = RateLimiter(redis_url=None)
    p = _principal("enterprise")  # no workspace window: the token's 3,000 a minute only
    remaining = [int((await limiter.check(p))["X-RateLimit-Remaining"]) for _ in range(300)]
    # exact countdown: the window's remaining after each call plus the lease's unused hits
    assert remaining == [3000 - 1 - i for i in range(300)]
    entries = _window(limiter, "tok", p.token_id, 3000)
    calls = len({id(e) for e in entries})
    assert len(entries) >= 300  # every admitted request is a hit of the window
    assert len(entries) - 300 < LEASE_MAX  # at most the live lease's unused hits beyond them
    assert calls < 300 / 8, calls  # leases grew with the demand: few calls to the store

    exact = RateLimiter(redis_url=None, leases=False)
    q = _principal("enterprise")
    remaining = [int((await exact.check(q))["X-RateLimit-Remaining"]) for _ in range(50)]
    assert remaining == [3000 - 1 - i for i in range(50)]
    entries = _window(exact, "tok", q.token_id, 3000)
    assert len(entries) == 50 and len({id(e) for e in entries}) == 50  # one call per request


async def test_near_the_limit_every_request_is_exact_and_the_61st_is_refused():
    limiter = RateLimiter(redis_url=None)
    free = _principal("free")  # 60 a minute: 60 // 64 = 0, so never a lease
    remaining = [int((await limiter.check(free))["X-RateLimit-Remaining"]) for _ in range(60)]
    assert remaining == list(range(59, -1, -1))
    entries = _window(limiter, "ws", free.workspace_id, 60)
    assert len(entries) == 60 and len({id(e) for e in entries}) == 60
    try:
        await limiter.check(free)
        raise AssertionError("the 61st request passed")
    except RateLimited as exc:
        assert exc.code == "PLAN_RATE_LIMIT_API"
        assert exc.headers["X-RateLimit-Remaining"] == "0" and 1 <= int(exc.headers["Retry-After"]) <= 60


async def test_a_burst_never_admits_more_than_the_limit():
    """700 concurrent checks of one starter workspace (600 a minute): exactly 600 pass and
    the window holds exactly 600 hits; the refusals carry Retry-After."""
    limiter = RateLimiter(redis_url=None)
    p = _principal("starter")
    results = await asyncio.gather(*(limiter.check(p) for _ in range(700)), return_exceptions=True)
    passed = [x for x in results if isinstance(x, dict)]
    refused = [x for x in results if isinstance(x, RateLimited)]
    assert len(passed) == 600 and len(refused) == 100
    assert len(_window(limiter, "ws", p.workspace_id, 600)) == 600
    assert refused[0].code == "PLAN_RATE_LIMIT_API" and 1 <= int(refused[0].headers["Retry-After"]) <= 60


async def test_a_lease_expires_after_its_second():
    limiter = RateLimiter(redis_url=None)
    p = _principal("enterprise")
    for _ in range(40):  # the lease grows with the demand
        await limiter.check(p)
    before = len({id(e) for e in _window(limiter, "tok", p.token_id, 3000)})
    await limiter.check(p)
    assert len({id(e) for e in _window(limiter, "tok", p.token_id, 3000)}) == before  # served from the lease
    await asyncio.sleep(LEASE_S + 0.1)
    headers = await limiter.check(p)
    entries = _window(limiter, "tok", p.token_id, 3000)
    assert len({id(e) for e in entries}) == before + 1  # expired: a new call (its unused hits wasted)
    # the headers say what the window has left: the wasted hits count against it
    assert int(headers["X-RateLimit-Remaining"]) == 3000 - len(entries) + limiter._leases[
        limiter._key(limiter._item(3000), "tok", p.token_id)].left
