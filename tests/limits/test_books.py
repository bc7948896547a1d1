"""The in-process pieces on a real database: the quota book's exactness under concurrency,
the usage queue's behaviour while the database is down, the limiter failing open."""

from __future__ import annotations

import asyncio
import secrets
from datetime import datetime, timezone

import pytest

from api.services.limits import RateLimiter
from storage.access import Principal, TokenType
from storage.db import Database
from storage.errors import PlanLimit
from storage.plans import plan
from storage.quotas import QuotaBook, decide
from storage.usage import UsageBuffer
from tests.limits.conftest import counter, seed_counter, this_month


def _ws_id() -> int:
    return 10**9 + secrets.randbelow(10**9)  # counters have no foreign key: a free id is enough


@pytest.mark.parametrize(("plan_name", "kind", "used", "adding", "recharge", "expected"), [
    ("free", "api_requests", 9_999, 1, False, 0),
    ("free", "api_requests", 10_000, 1, False, "PLAN_LIMIT_API_REQUESTS"),
    ("free", "api_requests", 10_000, 1, True, "PLAN_LIMIT_API_REQUESTS"),  # free cannot recharge
    ("pro", "automation_runs", 99_999, 3, True, 2),
    ("pro", "automation_runs", 100_500, 3, True, 3),
    ("business", "api_requests", 10**12, 1, False, 0),  # unlimited
    ("starter", "tables", 50, 1, False, "PLAN_LIMIT_TABLES"),
    ("free", "storage", 0, 2 * 1024**3, False, "PLAN_LIMIT_STORAGE"),
    ("enterprise", "builds", 10**9, 1, False, 0),
])
def test_decide_applies_the_plan_table(plan_name, kind, used, adding, recharge, expected):
    if isinstance(expected, str):
        with pytest.raises(PlanLimit) as err:
            decide(plan(plan_name), kind, used=used, adding=adding, auto_recharge=recharge)
        assert err.value.code == expected and err.value.status == 402 and err.value.extra == {"upgrade": True}
    else:
        assert decide(plan(plan_name), kind, used=used, adding=adding, auto_recharge=recharge) == expected


async def test_the_quota_book_admits_exactly_the_quota_under_concurrency(services, db):
    ws = _ws_id()
    seed_counter(db, ws, "api_requests", 9_900)
    pool = Database(services.pg.dsn, min_size=1, max_size=4)
    await pool.open()
    book = QuotaBook(pool, clock=lambda: datetime.now(timezone.utc))
    try:
        async def one() -> bool:
            try:
                await book.charge(ws, "free", "api_requests")
                return True
            except PlanLimit:
                return False

        results = await asyncio.gather(*(one() for _ in range(250)))
        assert results.count(True) == 100
        await book.flush()
        assert counter(db, ws, "api_requests") == 10_000
        # another process's increments are seen after a refresh
        seed_counter(db, ws, "api_requests", 5)
        book.refresh_s = 0
        await book.flush()
        assert book.used(ws, "api_requests") == 5
    finally:
        await pool.close()


async def test_the_quota_book_keeps_increments_while_the_database_is_down(services, db):
    ws = _ws_id()
    live = Database(services.pg.dsn, min_size=1, max_size=2)
    await live.open()
    book = QuotaBook(live, clock=lambda: datetime(2031, 5, 17, tzinfo=timezone.utc))
    try:
        for _ in range(3):
            await book.charge(ws, "free", "builds")
        book.db = Database("postgresql://nobody@127.0.0.1:1/none", timeout_s=0.5)  # never opened: fails
        await book.flush()
        assert book.used(ws, "builds") == 3 and counter(db, ws, "builds", "2031-05") == 0
        book.db = live
        await book.flush()
        assert counter(db, ws, "builds", "2031-05") == 3 and book.used(ws, "builds") == 3
    finally:
        await live.close()


async def test_the_usage_queue_keeps_the_newest_rows_and_counts_drops(services, db):
    ws = _ws_id()
    buf = UsageBuffer(capacity=5)
    for status in range(200, 208):
        buf.record(workspace_id=ws, token_id=1, door="rest", method="GET", route="/r", status=status,
                   duration_ms=1.5)
    assert len(buf) == 5 and buf.dropped == 3
    down = Database("postgresql://nobody@127.0.0.1:1/none", timeout_s=0.5)
    assert await buf.flush(down) == 0
    buf.record(workspace_id=ws, token_id=1, door="rest", method="GET", route="/r", status=208, duration_ms=1)
    assert len(buf) == 5 and buf.dropped == 4  # the oldest queued row made room
    live = Database(services.pg.dsn, min_size=1, max_size=2)
    await live.open()
    try:
        assert await buf.flush(live) == 5
    finally:
        await live.close()
    statuses = [r[0] for r in db.execute(
        "SELECT status FROM wds.usage WHERE workspace_id = %s ORDER BY status", (ws,)).fetchall()]
    assert statuses == [204, 205, 206, 207, 208]


async def test_the_rate_limiter_fails_open_when_redis_is_unreachable():
    limiter = RateLimiter(redis_url="redis://127.0.0.1:1/0")
    p = Principal(token_id=1, workspace_id=1, type=TokenType.VIBE_MCP, profile_id=None, plan="free",
                  read_only=False, expires_at=None)
    assert [await limiter.check(p) for _ in range(61)] == [{}] * 61


def test_month_keys_are_utc_calendar_months():
    assert this_month() == datetime.now(timezone.utc).strftime("%Y-%m")
