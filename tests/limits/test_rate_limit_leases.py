"""Quota leasing with the shared (Redis) store: a process takes several hits of a window in
one round trip and serves them from memory, never admitting more than the limit across
processes; near the limit, and with leasing off, every request is one exact round trip.
Real redis-server (the ``redis_url`` fixture), real API processes."""

from __future__ import annotations

import asyncio
import secrets
import time
from concurrent.futures import ThreadPoolExecutor

import redis

from api.services.limits import LEASE_MAX, LEASE_S, PREFETCH_S, RateLimiter
from storage.access import Principal, TokenType
from storage.errors import RateLimited
from tests.limits.conftest import rest_client


def _scripts_run(r: redis.Redis) -> int:
    """Lua scripts Redis ran since the last CONFIG RESETSTAT (every limiter round trip
    sends limits' scripts: EVALSHA, or EVAL)."""
    stats = r.info("commandstats")
    return sum(int(stats.get(name, {}).get("calls", 0)) for name in ("cmdstat_evalsha", "cmdstat_eval"))


def _principal(plan: str) -> Principal:
    ident = 10**9 + secrets.randbelow(10**9)  # windows are keyed by id: a fresh one is a fresh window
    return Principal(token_id=ident, workspace_id=ident, type=TokenType.VIBE_MCP, profile_id=None, plan=plan,
                     read_only=False, expires_at=None)


def _window_entries(r: redis.Redis, kind: str, ident: int) -> int:
    """Hits recorded in Redis for one window (limits' moving window is a list)."""
    return sum(int(r.llen(key)) for key in r.scan_iter(f"LIMITS:LIMITER/{kind}/{ident}/*"))


def test_leasing_serves_most_requests_without_a_redis_round_trip(make_workspace, extra_api, redis_url):
    r = redis.Redis.from_url(redis_url)
    leased = extra_api(WDS_REDIS_URL=redis_url)
    exact = extra_api(WDS_REDIS_URL=redis_url, WDS_RATE_LIMIT_LEASES="false")
    n = 300
    ws = make_workspace(plan="enterprise")  # no workspace window: the token's 3,000/minute only
    with rest_client(leased.base_url, ws.builder_token) as c:
        c.get("/tables")  # the token is resolved and cached before counting
        r.config_resetstat()
        remaining = [int(c.get("/tables").headers["X-RateLimit-Remaining"]) for _ in range(n)]
    round_trips = _scripts_run(r)
    # today's code made two round trips a request (2n scripts); a lease serves up to 32
    assert round_trips < n / 4, round_trips
    # the headers count down locally between round trips, and never claim more than is left
    assert remaining == sorted(remaining, reverse=True)
    assert remaining[0] == 3000 - 2 and remaining[-1] <= 3000 - 1 - n

    other = make_workspace(plan="enterprise")
    with rest_client(exact.base_url, other.builder_token) as c:
        c.get("/tables")
        time.sleep(3 * PREFETCH_S)  # the leasing process's prefetcher has let its idle key go
        r.config_resetstat()
        remaining = [int(c.get("/tables").headers["X-RateLimit-Remaining"]) for _ in range(50)]
    # exact mode: one round trip a request (limits' acquire and window scripts, pipelined)
    assert _scripts_run(r) == 2 * 50
    assert remaining == [3000 - 2 - i for i in range(50)]


def test_two_processes_leasing_never_admit_more_than_the_limit(make_workspace, extra_api, redis_url):
    """Starter: 600 a minute per workspace, leases of up to 9 hits (600 // 64) while the
    window has room. 16 clients spread over two API processes send 720 requests as fast
    as they can: at most 600 are admitted, and as many hits are in the shared window."""
    r = redis.Redis.from_url(redis_url)
    a = extra_api(WDS_REDIS_URL=redis_url)
    b = extra_api(WDS_REDIS_URL=redis_url)
    ws = make_workspace(plan="starter")
    clients = [rest_client(p.base_url, ws.builder_token) for p in (a, b)]
    try:
        r.config_resetstat()
        with ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(lambda i: clients[i % 2].get("/tables").status_code, range(720)))
        round_trips = _scripts_run(r)
    finally:
        for c in clients:
            c.close()
    admitted = statuses.count(200)
    assert set(statuses) == {200, 429}
    assert admitted <= 600, admitted
    # under-admission: leases unused when they expired, at most one per process and window
    assert admitted >= 600 - 2 * LEASE_MAX, admitted
    assert _window_entries(r, "ws", ws.id) == 600
    # leases were taken: fewer round trips than the 2 windows × 720 requests without them
    assert round_trips < 2 * 2 * 720, round_trips


async def test_concurrent_requests_share_one_round_trip_and_never_double_spend(redis_url):
    """700 requests of one starter workspace at once in one process: one round trip at a
    time per window, the others wait for it and take from its lease (or are refused with
    its answer when the window is full). Exactly 600 pass, each backed by a hit in Redis."""
    r = redis.Redis.from_url(redis_url)
    limiter = RateLimiter(redis_url=redis_url)
    p = _principal("starter")
    # the limiter's connections made first, by another workspace: on a loaded machine a
    # connect can take longer than the limiter's 0.5 s connect timeout, and the burst
    # would then fail open (by design) instead of measuring the leases
    await asyncio.gather(*(limiter.check(_principal("starter")) for _ in range(2)))
    r.config_resetstat()
    results = await asyncio.gather(*(limiter.check(p) for _ in range(700)), return_exceptions=True)
    passed = [x for x in results if isinstance(x, dict)]
    refused = [x for x in results if isinstance(x, RateLimited)]
    assert len(passed) == 600 and len(refused) == 100, {type(x) for x in results}
    assert all(h for h in passed)  # never failed open (a herd of connections would have)
    assert _window_entries(r, "ws", p.workspace_id) == 600
    assert refused[0].code == "PLAN_RATE_LIMIT_API" and 1 <= int(refused[0].headers["Retry-After"]) <= 60
    # the workspace window: 600 hits, at most one lease (≤ 9) a round trip while remaining
    # >= 128, then one hit each; refusals each wait for (and share) a round trip
    assert _scripts_run(r) < 2 * 2 * 700
    await limiter.close()


async def test_a_lease_expires_and_near_the_limit_every_request_is_exact(redis_url):
    r = redis.Redis.from_url(redis_url)
    limiter = RateLimiter(redis_url=redis_url)
    p = _principal("enterprise")
    for _ in range(40):  # the token's lease grows with the demand
        await limiter.check(p)
    r.config_resetstat()
    await limiter.check(p)
    assert _scripts_run(r) == 0  # served from the lease
    await asyncio.sleep(LEASE_S + 3 * PREFETCH_S)
    # idle: the prefetcher took at most one more lease for the key, then let it go
    assert _scripts_run(r) <= 2
    assert limiter._prefetcher is not None and limiter._prefetcher.done()
    r.config_resetstat()
    await limiter.check(p)
    assert _scripts_run(r) == 2  # every lease expired: a round trip of its own (unused hits wasted)

    free = _principal("free")  # 60 a minute: 60 // 64 = 0, every request one exact hit
    r.config_resetstat()
    remaining = []
    for _ in range(60):
        headers = await limiter.check(free)
        remaining.append(int(headers["X-RateLimit-Remaining"]))
    assert remaining == list(range(59, -1, -1))
    # each request: the workspace window exactly; the token window is leased
    assert 2 * 60 <= _scripts_run(r) < 2 * 2 * 60
    start = time.monotonic()
    try:
        await limiter.check(free)
        raise AssertionError("the 61st request passed")
    except RateLimited as exc:
        assert exc.code == "PLAN_RATE_LIMIT_API"
    assert time.monotonic() - start < 1
    await limiter.close()


def _reads(r: redis.Redis) -> int:
    """Requests Redis read from its clients since the last CONFIG RESETSTAT (a pipeline of
    a few keys is one read), less the INFO call asking."""
    return int(r.info("stats")["total_reads_processed"]) - 1


async def test_busy_keys_leases_are_refilled_ahead_a_round_trip_for_many(redis_url):
    """16 tokens at ~40 requests a second each in one process. The prefetcher refills the
    leases of keys about to run out, many keys a round trip, so a busy key makes no round
    trip of its own: Redis reads far fewer requests than one a key a second (what each key
    made before). Every admitted request is a hit in the shared window, the headers never
    count up, and when the demand stops the prefetcher takes at most one more lease a key
    and stops."""
    r = redis.Redis.from_url(redis_url)
    limiter = RateLimiter(redis_url=redis_url)
    keys = [_principal("enterprise") for _ in range(16)]
    served = {p.token_id: 0 for p in keys}
    seen: dict[int, list[int]] = {p.token_id: [] for p in keys}

    async def drive(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for p in keys:
                headers = await limiter.check(p)
                served[p.token_id] += 1
                seen[p.token_id].append(int(headers["X-RateLimit-Remaining"]))
            await asyncio.sleep(0.025)

    await drive(1.0)  # the keys' leases grow with their demand
    r.config_resetstat()
    await drive(2.0)
    reads = _reads(r)
    # before the prefetcher each busy key made its own round trip about once a second
    # (~32 here); now ~4 passes a second, each one pipeline for the keys due
    assert reads <= 14, reads
    assert _scripts_run(r) >= 2 * len(keys)  # the leases were refilled all the same
    for p in keys:
        remaining = seen[p.token_id]
        assert remaining == sorted(remaining, reverse=True), p.token_id
        # leased hits are taken before they are served: at most the current lease's and
        # the prefetched lease's unused hits more
        assert 0 <= _window_entries(r, "tok", p.token_id) - served[p.token_id] <= 2 * LEASE_MAX

    await asyncio.sleep(4 * PREFETCH_S)
    assert limiter._prefetcher is not None and limiter._prefetcher.done()  # idle keys let go
    for p in keys:
        assert _window_entries(r, "tok", p.token_id) - served[p.token_id] <= 2 * LEASE_MAX
    await limiter.close()


async def test_a_prefetch_that_fails_fails_open_and_the_limiter_recovers(redis_url):
    """Redis goes away under busy keys: requests are let through (fail open, as a key's
    own round trip does), the prefetcher keeps running and the limiter counts again once
    Redis answers."""
    r = redis.Redis.from_url(redis_url)
    limiter = RateLimiter(redis_url=redis_url)
    keys = [_principal("enterprise") for _ in range(4)]
    for _ in range(30):
        for p in keys:
            await limiter.check(p)
        await asyncio.sleep(0.01)
    r.client_pause(int(3000 * PREFETCH_S))  # no reply for three passes: every call times out (0.5 s)
    try:
        answers = []
        end = time.monotonic() + 2 * PREFETCH_S
        while time.monotonic() < end:
            answers += [await limiter.check(p) for p in keys]
            await asyncio.sleep(0.01)
    finally:
        r.client_unpause()
    assert {} in answers  # failed open: no rate-limit headers, the request passed
    # Redis back: every request is counted again and the busy keys are prefetched again
    r.config_resetstat()
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        last = [await limiter.check(p) for p in keys]
        await asyncio.sleep(0.01)
    assert all(h and int(h["X-RateLimit-Remaining"]) < 3000 for h in last)
    assert limiter._prefetcher is not None and not limiter._prefetcher.done()
    assert _scripts_run(r) > 0
    await limiter.close()
    assert limiter._prefetcher is None
