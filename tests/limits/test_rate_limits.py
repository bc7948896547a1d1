"""Per-minute rate limits: the plan's workspace limit, the per-token ceiling, headers, and
one limit shared by several API processes through Redis."""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor

from tests.limits.conftest import rest_client


def test_the_60th_request_in_a_minute_passes_and_the_61st_fails_on_free(make_workspace):
    ws = make_workspace(plan="free")
    t0 = time.time()
    first = ws.api.get("/tables")
    assert first.status_code == 200
    assert first.headers["X-RateLimit-Limit"] == "60" and first.headers["X-RateLimit-Remaining"] == "59"
    time.sleep(2.0)  # so Retry-After must come from the window, not be a flat 60
    for i in range(2, 61):
        r = ws.api.get("/tables")
        assert r.status_code == 200, (i, r.text)
        assert r.headers["X-RateLimit-Remaining"] == str(60 - i)
    r = ws.api.get("/tables")
    t61 = time.time()
    assert r.status_code == 429
    body = r.json()
    assert body["code"] == "PLAN_RATE_LIMIT_API" and body["upgrade"] is True
    # a request is accepted again when the first one leaves the 60-second window
    expected = math.ceil(t0 + 60 - t61)
    assert expected - 1 <= int(r.headers["Retry-After"]) <= expected + 1 and int(r.headers["Retry-After"]) < 60
    assert r.headers["X-RateLimit-Remaining"] == "0"
    # refused requests do not consume the window: it is still exactly full
    assert ws.api.post("/sql", json={"query": "SELECT * FROM x"}).json()["code"] == "PLAN_RATE_LIMIT_API"


def test_other_workspaces_are_unaffected(make_workspace):
    busy, quiet = make_workspace(plan="free"), make_workspace(plan="free")
    for _ in range(60):
        assert busy.api.get("/tables").status_code == 200
    assert busy.api.get("/tables").status_code == 429
    r = quiet.api.get("/tables")
    assert r.status_code == 200 and r.headers["X-RateLimit-Remaining"] == "59"


def test_every_token_of_a_workspace_shares_its_plan_limit(make_workspace):
    ws = make_workspace(plan="free")
    other = ws.client(ws.token("rest_api")["token"])
    for i in range(60):
        assert (ws.api if i % 2 else other).get("/tables").status_code == 200
    assert other.get("/tables").json()["code"] == "PLAN_RATE_LIMIT_API"


def test_rate_limit_headers_follow_the_plan(make_workspace):
    for plan, limit in (("starter", "600"), ("pro", "3000"), ("business", "3000"), ("enterprise", "3000")):
        r = make_workspace(plan=plan).api.get("/tables")
        assert r.status_code == 200
        # business and enterprise: the per-token ceiling binds a single token first
        assert r.headers["X-RateLimit-Limit"] == limit, plan
        assert int(r.headers["X-RateLimit-Reset"]) <= 60


def test_the_per_token_ceiling_is_3000_a_minute_on_every_plan(make_workspace):
    ws = make_workspace(plan="enterprise")  # unlimited plan: only the token ceiling applies
    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda _: ws.api.get("/tables").status_code, range(3000)))
    assert statuses.count(200) == 3000
    r = ws.api.get("/tables")
    assert r.status_code == 429
    assert r.json()["code"] == "TOKEN_RATE_LIMIT" and "upgrade" not in r.json()
    assert 1 <= int(r.headers["Retry-After"]) <= 60
    # another token of the same workspace is not affected
    fresh = ws.client(ws.token("rest_api")["token"])
    assert fresh.get("/tables").status_code == 200


def test_rate_limits_can_be_turned_off(make_workspace, extra_api):
    api = extra_api(WDS_RATE_LIMITS="false")
    ws = make_workspace(plan="free")
    with rest_client(api.base_url, ws.builder_token) as c:
        responses = [c.get("/tables") for _ in range(65)]
    assert all(r.status_code == 200 for r in responses)
    assert "X-RateLimit-Limit" not in responses[-1].headers


def test_two_api_processes_sharing_redis_enforce_one_limit(make_workspace, extra_api, redis_url):
    a = extra_api(WDS_REDIS_URL=redis_url)
    b = extra_api(WDS_REDIS_URL=redis_url)
    ws = make_workspace(plan="free")
    with rest_client(a.base_url, ws.builder_token) as ca, rest_client(b.base_url, ws.builder_token) as cb:
        for i in range(60):
            r = (ca if i % 2 else cb).get("/tables")
            assert r.status_code == 200, (i, r.text)
            assert r.headers["X-RateLimit-Remaining"] == str(59 - i)
        for c in (ca, cb):
            r = c.get("/tables")
            assert r.status_code == 429 and r.json()["code"] == "PLAN_RATE_LIMIT_API"
            assert 1 <= int(r.headers["Retry-After"]) <= 60


def test_the_in_process_window_store_sweeps_inline_and_answers_exactly():
    """The rate limiter's in-process store (limits' synchronous MemoryStorage, called from
    the event loop) starts no sweep thread, refuses the hit past the limit, and its inline
    sweep drops expired windows without changing an answer."""
    import threading
    import time

    from limits import RateLimitItemPerSecond

    from api.services.limits import _SyncMemoryStorage

    before = threading.active_count()
    store = _SyncMemoryStorage()
    item = RateLimitItemPerSecond(3)
    key = item.key_for("tok", "1")
    assert [store.acquire_entry(key, 3, 1) for _ in range(4)] == [True, True, True, False]
    assert not store.timer.is_alive() and threading.active_count() == before
    assert store.acquire_entry("other", 3, 60)  # a window that stays
    time.sleep(1.05)  # the first window's entries expire
    store._swept = 0.0  # a sweep is due on the next hit
    assert store.acquire_entry(key, 3, 1)  # room again, as without a sweep
    assert len(store.events[key]) == 1 and len(store.events["other"]) == 1
    window = store.events["other"]
    store._sweep(time.time())  # nothing of it expired: the window is not copied
    assert store.events["other"] is window and len(window) == 1
    store._swept = 0.0
    store._sweep(time.time() + 61)  # everything expired: windows and their locks go
    assert store.events == {} and key not in store.locks
