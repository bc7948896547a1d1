"""Monthly quotas and plan ceilings (spec "Limits", DESIGN §4).

Two sorts of limit live here, both read from :mod:`storage.plans` (the one table of plan
figures):

* **monthly counters** — API requests, automation runs, builds and AI credits — kept in
  ``wds.quota_counters (workspace_id, month 'YYYY-MM', kind, used)``. They survive
  restarts and reset on the calendar month (UTC) simply because a new month is a new key.
* **ceilings** — tables and storage bytes — measured from what exists, not counted.

The hot path must not pay a database round trip per request, so :class:`QuotaBook` keeps,
per API process, the last known totals plus the increments not yet written, and writes
them once a second with one multi-row ``INSERT ... ON CONFLICT DO UPDATE SET used = used +
excluded.used RETURNING used`` (which also hands back the new totals). Totals of other
processes are picked up by a refresh every few seconds.

Exactness: within one process the check and the increment happen without an ``await``
in between, so with one API process the N-th unit passes and the N+1-th is refused.
Across processes each one sees the others' increments only after their flush and our
refresh, so the overshoot is bounded by what the other processes admit in
``flush_s + refresh_s`` (about four seconds of traffic).

Past a quota, plans that allow it (``Plan.can_auto_recharge``, Pro and above) with the
workspace's ``auto_recharge`` on keep going; every unit beyond the quota is also counted
under :data:`EXCESS` (billed as AI credits) instead of being refused.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

import psycopg

from storage.db import Database
from storage.errors import PlanLimit
from storage.plans import Plan
from storage.plans import plan as plan_of

log = logging.getLogger("wds.quotas")

API_REQUESTS = "api_requests"
AUTOMATION_RUNS = "automation_runs"
BUILDS = "builds"
AI_CREDITS = "ai_credits"
TABLES = "tables"
STORAGE = "storage"
# units used past a quota under auto-recharge, billed as AI credits
EXCESS = "ai_credits_excess"

# kind → the Plan field holding its figure (codes: PLAN_LIMIT_<KIND>)
LIMIT_FIELDS: dict[str, str] = {
    API_REQUESTS: "requests_per_month",
    AUTOMATION_RUNS: "automation_runs_per_month",
    BUILDS: "builds_per_month",
    AI_CREDITS: "ai_credits_per_month",
    TABLES: "tables",
    STORAGE: "storage_bytes",
}
MONTHLY = (API_REQUESTS, AUTOMATION_RUNS, BUILDS, AI_CREDITS)
_WHAT = {
    API_REQUESTS: "API requests this month",
    AUTOMATION_RUNS: "automation runs this month",
    BUILDS: "builds this month",
    AI_CREDITS: "AI credits this month",
    TABLES: "tables",
    STORAGE: "bytes of storage",
}

Key = tuple[int, str, str]  # (workspace_id, month, kind)
Pair = tuple[int, str]  # (workspace_id, month)
Conn = psycopg.AsyncConnection[Any]


def month_key(at: datetime) -> str:
    """The calendar month (UTC) a moment belongs to.

    >>> month_key(datetime(2026, 12, 31, 23, 59, tzinfo=timezone.utc))
    '2026-12'
    """
    return at.astimezone(timezone.utc).strftime("%Y-%m")


def limit_of(plan: Plan, kind: str) -> int | None:
    """The plan's figure for ``kind`` (``None`` = unlimited).

    >>> limit_of(plan_of("free"), "api_requests"), limit_of(plan_of("enterprise"), "tables")
    (10000, None)
    """
    return getattr(plan, LIMIT_FIELDS[kind])  # type: ignore[no-any-return]


def decide(plan: Plan, kind: str, *, used: int, adding: int, auto_recharge: bool) -> int:
    """Whether ``adding`` more units fit; returns the units beyond the quota (0 when within).

    Raises:
        PlanLimit: 402 ``PLAN_LIMIT_<KIND>`` when they do not fit and the workspace may not
            pay the excess in AI credits.

    >>> decide(plan_of("free"), "tables", used=9, adding=1, auto_recharge=False)
    0
    >>> decide(plan_of("pro"), "tables", used=500, adding=2, auto_recharge=True)
    2
    """
    limit = limit_of(plan, kind)
    if limit is None or used + adding <= limit:
        return 0
    if plan.can_auto_recharge and auto_recharge:
        return used + adding - max(limit, used)
    raise PlanLimit(
        f"the {plan.name} plan allows {limit:,} {_WHAT[kind]} and {used:,} are used; "
        "upgrade the plan (or, on Pro and above, turn on auto-recharge)",
        kind=kind,
    )


# --------------------------------------------------------------------------- SQL


async def load_counters(conn: Conn, *, pairs: Iterable[Pair]) -> tuple[dict[Key, int], dict[int, bool]]:
    """Current totals of every kind for ``(workspace, month)`` pairs, and the workspaces'
    ``auto_recharge`` flags — one round trip."""
    pairs = list(pairs)
    ws_ids = sorted({w for w, _ in pairs})
    months = sorted({m for _, m in pairs})
    cur = await conn.execute(
        "SELECT 'c' AS src, workspace_id, month, kind, used, NULL::boolean AS flag"
        " FROM wds.quota_counters WHERE workspace_id = ANY(%s) AND month = ANY(%s)"
        " UNION ALL SELECT 'w', id, NULL, NULL, NULL, auto_recharge FROM wds.workspaces WHERE id = ANY(%s)",
        (ws_ids, months, ws_ids),
    )
    wanted = set(pairs)
    totals: dict[Key, int] = {}
    flags: dict[int, bool] = {}
    for row in await cur.fetchall():
        if row["src"] == "w":
            flags[row["workspace_id"]] = bool(row["flag"])
        elif (row["workspace_id"], row["month"]) in wanted:
            totals[(row["workspace_id"], row["month"], row["kind"])] = int(row["used"])
    return totals, flags


async def add_counters(conn: Conn, *, deltas: dict[Key, int]) -> dict[Key, int]:
    """Add increments in one statement; returns the new totals of the keys written."""
    if not deltas:
        return {}
    keys = list(deltas)
    cur = await conn.execute(
        "INSERT INTO wds.quota_counters AS q (workspace_id, month, kind, used)"
        " SELECT * FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::bigint[])"
        " ON CONFLICT (workspace_id, month, kind) DO UPDATE SET used = q.used + excluded.used"
        " RETURNING workspace_id, month, kind, used",
        ([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys], [deltas[k] for k in keys]),
    )
    return {(r["workspace_id"], r["month"], r["kind"]): int(r["used"]) for r in await cur.fetchall()}


async def table_count(conn: Conn, *, workspace_id: int) -> int:
    cur = await conn.execute("SELECT count(*) AS n FROM wds.tables WHERE workspace_id = %s", (workspace_id,))
    row = await cur.fetchone()
    return int(row["n"]) if row else 0


async def storage_bytes(conn: Conn, *, workspace_id: int) -> int:
    cur = await conn.execute(
        "SELECT coalesce(sum(size), 0) AS n FROM wds.objects WHERE workspace_id = %s", (workspace_id,)
    )
    row = await cur.fetchone()
    return int(row["n"]) if row else 0


# --------------------------------------------------------------------------- the book


class QuotaBook:
    """Per-process view of the monthly counters: last known totals + unwritten increments.

    Args:
        db: the pool the counters are flushed through.
        clock: the current moment (the month key comes from it; tests move it).
        refresh_s: how often other processes' increments are read back.
        idle_s: a workspace not charged for this long is forgotten (memory stays bounded).
    """

    def __init__(
        self, db: Database, *, clock: Callable[[], datetime], refresh_s: float = 3.0, idle_s: float = 600.0
    ) -> None:
        self.db = db
        self.clock = clock
        self.refresh_s = refresh_s
        self.idle_s = idle_s
        self._base: dict[Key, int] = {}
        self._pending: dict[Key, int] = {}
        self._inflight: dict[Key, int] = {}
        self._seen: dict[Pair, float] = {}
        self._recharge: dict[int, bool] = {}
        self._loading: dict[Pair, asyncio.Future[None]] = {}
        self._lock = asyncio.Lock()
        self._month = ""
        self._month_until = 0.0
        self._refreshed = time.monotonic()

    # ------------------------------------------------------------------ reading
    def month(self) -> str:
        """The current month key, recomputed at most once a second."""
        now = time.monotonic()
        if now >= self._month_until:
            self._month = month_key(self.clock())
            self._month_until = now + 1.0
        return self._month

    def used(self, workspace_id: int, kind: str, month: str | None = None) -> int:
        key = (workspace_id, month or self.month(), kind)
        return self._base.get(key, 0) + self._inflight.get(key, 0) + self._pending.get(key, 0)

    def auto_recharge(self, workspace_id: int) -> bool:
        return self._recharge.get(workspace_id, False)

    def note_workspace(self, workspace_id: int, *, auto_recharge: bool) -> None:
        """Take a workspace's new ``auto_recharge`` at once (the admin API calls this)."""
        self._recharge[workspace_id] = auto_recharge

    async def ensure(self, workspace_id: int, month: str) -> None:
        """Load a workspace's totals for ``month`` once; concurrent first calls share one load."""
        pair = (workspace_id, month)
        if pair in self._seen:
            self._seen[pair] = time.monotonic()
            return
        waiting = self._loading.get(pair)
        if waiting is None:
            waiting = asyncio.get_running_loop().create_future()
            self._loading[pair] = waiting
            try:
                async with self.db.connection() as conn:
                    totals, flags = await load_counters(conn, pairs=[pair])
                for kind in MONTHLY + (EXCESS,):
                    self._base[(workspace_id, month, kind)] = totals.get((workspace_id, month, kind), 0)
                self._recharge.update(flags)
                self._seen[pair] = time.monotonic()
                waiting.set_result(None)
            except BaseException as exc:
                waiting.set_exception(exc)
                waiting.exception()  # retrieved: no "never retrieved" warning when nobody else waits
                raise
            finally:
                self._loading.pop(pair, None)
        else:
            await asyncio.shield(waiting)

    async def ensure_flags(self, workspace_id: int) -> None:
        """Make sure the workspace's ``auto_recharge`` flag is known (loads it with the counters)."""
        if workspace_id not in self._recharge:
            await self.ensure(workspace_id, self.month())

    # ------------------------------------------------------------------ charging
    async def charge(self, workspace_id: int, plan_name: str, kind: str, units: int = 1) -> int:
        """Count ``units`` of ``kind`` for this month if the plan allows them.

        Returns the units beyond the quota that auto-recharge pays (0 normally).

        Raises:
            PlanLimit: 402 ``PLAN_LIMIT_<KIND>`` (nothing is counted then).
        """
        month = self.month()
        pair = (workspace_id, month)
        if pair in self._seen:
            self._seen[pair] = time.monotonic()
        else:
            await self.ensure(workspace_id, month)
        key = (workspace_id, month, kind)
        # no await from here on: check and increment are one step for this process
        used = self._base.get(key, 0) + self._inflight.get(key, 0) + self._pending.get(key, 0)
        excess = decide(plan_of(plan_name), kind, used=used, adding=units,
                        auto_recharge=self._recharge.get(workspace_id, False))
        self._pending[key] = self._pending.get(key, 0) + units
        if excess:
            ek = (workspace_id, month, EXCESS)
            self._pending[ek] = self._pending.get(ek, 0) + excess
        return excess

    async def check(self, workspace_id: int, plan_name: str, kind: str, units: int = 1) -> None:
        """Raise :class:`PlanLimit` if ``units`` more would not fit; counts nothing."""
        month = self.month()
        if (workspace_id, month) not in self._seen:
            await self.ensure(workspace_id, month)
        decide(plan_of(plan_name), kind, used=self.used(workspace_id, kind, month), adding=units,
               auto_recharge=self._recharge.get(workspace_id, False))

    def add_excess(self, workspace_id: int, units: int) -> None:
        """Record units past a ceiling (tables, storage) paid by auto-recharge."""
        key = (workspace_id, self.month(), EXCESS)
        self._pending[key] = self._pending.get(key, 0) + units

    # ------------------------------------------------------------------ background
    async def flush(self) -> None:
        """Write unwritten increments (one statement) and, every ``refresh_s``, read back the
        totals other processes wrote. Failures keep the increments for the next try."""
        async with self._lock:
            if self._pending:
                batch, self._pending = self._pending, {}
                self._inflight = batch
                try:
                    async with self.db.connection() as conn:
                        totals = await add_counters(conn, deltas=batch)
                except Exception as exc:
                    for key, n in batch.items():
                        self._pending[key] = self._pending.get(key, 0) + n
                    self._inflight = {}
                    log.warning("quota counters not written (kept for the next try): %s", exc)
                    return
                # one step (no await): the totals now include the batch
                self._base.update(totals)
                self._inflight = {}
            if time.monotonic() - self._refreshed >= self.refresh_s:
                await self._refresh()

    async def _refresh(self) -> None:
        self._refreshed = now = time.monotonic()
        for pair, seen in list(self._seen.items()):
            idle = now - seen > self.idle_s or pair[1] != self.month()
            if idle and not any(k[:2] == pair for k in self._pending):
                self._seen.pop(pair, None)
                for kind in MONTHLY + (EXCESS,):
                    self._base.pop((pair[0], pair[1], kind), None)
        if not self._seen:
            return
        try:
            async with self.db.connection() as conn:
                totals, flags = await load_counters(conn, pairs=list(self._seen))
        except Exception as exc:
            log.warning("quota totals not refreshed: %s", exc)
            return
        self._base.update(totals)
        self._recharge.update(flags)
