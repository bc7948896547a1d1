"""The usage log (spec: "Every call is logged under usage"): buffered writes and reports.

Each API call becomes one row of ``wds.usage`` (workspace, token, door, method, route
template, status, duration). Rows are appended to a bounded in-memory queue on the
request path (no I/O there) and written about once a second with one ``COPY``. When the
database is down the queue keeps the newest rows: past its capacity the oldest are
dropped and counted in :attr:`UsageBuffer.dropped`, so an outage never grows memory
without bound nor slows requests down.
"""

from __future__ import annotations

import logging
from collections import deque
from datetime import date, datetime, timedelta, timezone
from typing import Any

import psycopg

from storage.db import Database
from storage.plans import plan as plan_of
from storage.quotas import EXCESS, MONTHLY, limit_of

log = logging.getLogger("wds.usage")

Row = tuple[int | None, int | None, str, str, str, int, float, datetime]
COLUMNS = "workspace_id, token_id, door, method, route, status, duration_ms, created_at"
MAX_DAYS = 366


class UsageBuffer:
    """A bounded queue of usage rows flushed with one ``COPY``.

    Args:
        capacity: rows kept while the database cannot take them; older ones are dropped.
    """

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._rows: deque[Row] = deque(maxlen=capacity)
        self.dropped = 0
        self.written = 0

    def __len__(self) -> int:
        return len(self._rows)

    def record(
        self, *, workspace_id: int | None, token_id: int | None, door: str, method: str,
        route: str, status: int, duration_ms: float, at: datetime | None = None,
    ) -> None:
        """Queue one call (no I/O). A full queue drops its oldest row."""
        if len(self._rows) == self.capacity:
            self.dropped += 1
        self._rows.append((workspace_id, token_id, door, method, route, status, round(duration_ms, 3),
                           at or datetime.now(timezone.utc)))

    async def flush(self, db: Database) -> int:
        """Write every queued row with one COPY; returns how many were written.

        On failure the rows go back in front of newer ones (the oldest dropped past
        capacity) and the error is logged, never raised: usage must not fail a request.
        """
        if not self._rows:
            return 0
        batch = list(self._rows)
        self._rows.clear()
        try:
            async with (
                db.connection() as conn,
                conn.cursor() as cur,
                cur.copy(f"COPY wds.usage ({COLUMNS}) FROM STDIN") as copy,
            ):
                for row in batch:
                    await copy.write_row(row)
        except Exception as exc:
            merged = batch + list(self._rows)
            overflow = max(0, len(merged) - self.capacity)
            if overflow:
                self.dropped += overflow
                log.warning("usage log: %d rows dropped while the database is unavailable", overflow)
            self._rows = deque(merged[overflow:], maxlen=self.capacity)
            log.warning("usage rows not written yet (%d queued): %s", len(self._rows), exc)
            return 0
        self.written += len(batch)
        return len(batch)


# --------------------------------------------------------------------------- reports


async def usage_report(
    conn: psycopg.AsyncConnection[Any], *, workspace_id: int, days: int, plan_name: str, month: str,
) -> dict[str, Any]:
    """Request counts of the last ``days`` days (UTC) by day, token, door and status, plus
    this month's quota counters against the plan — two queries.

    Shape::

        {workspace_id, days, since, total,
         by_day: [{day, requests}], by_token: [{token_id, token_name, requests}],
         by_door: [{door, requests}], by_status: [{status, requests}],
         rows: [{day, token_id, door, status, requests}],
         month, quotas: {kind: {used, limit}}}
    """
    days = max(1, min(int(days), MAX_DAYS))
    since = datetime.now(timezone.utc).date() - timedelta(days=days - 1)
    cur = await conn.execute(
        "SELECT u.day, u.token_id, t.name AS token_name, u.door, u.status, u.n FROM ("
        "  SELECT (created_at AT TIME ZONE 'UTC')::date AS day, token_id, door, status, count(*) AS n"
        "  FROM wds.usage WHERE workspace_id = %s AND created_at >= %s"
        "  GROUP BY 1, 2, 3, 4) u"
        " LEFT JOIN wds.tokens t ON t.id = u.token_id"
        " ORDER BY u.day, u.token_id NULLS FIRST, u.door, u.status",
        (workspace_id, datetime.combine(since, datetime.min.time(), tzinfo=timezone.utc)),
    )
    rows = await cur.fetchall()
    by_day: dict[date, int] = {}
    by_token: dict[int | None, list[Any]] = {}
    by_door: dict[str, int] = {}
    by_status: dict[int, int] = {}
    for r in rows:
        n = int(r["n"])
        by_day[r["day"]] = by_day.get(r["day"], 0) + n
        by_token.setdefault(r["token_id"], [r["token_name"], 0])[1] += n
        by_door[r["door"]] = by_door.get(r["door"], 0) + n
        by_status[r["status"]] = by_status.get(r["status"], 0) + n
    cur = await conn.execute(
        "SELECT kind, used FROM wds.quota_counters WHERE workspace_id = %s AND month = %s",
        (workspace_id, month),
    )
    counters = {r["kind"]: int(r["used"]) for r in await cur.fetchall()}
    plan = plan_of(plan_name)
    quotas: dict[str, dict[str, int | None]] = {
        kind: {"used": counters.get(kind, 0), "limit": limit_of(plan, kind)} for kind in MONTHLY
    }
    quotas[EXCESS] = {"used": counters.get(EXCESS, 0), "limit": None}
    return {
        "workspace_id": workspace_id,
        "days": days,
        "since": since.isoformat(),
        "total": sum(by_day.values()),
        "by_day": [{"day": d.isoformat(), "requests": n} for d, n in sorted(by_day.items())],
        "by_token": [{"token_id": t, "token_name": v[0], "requests": v[1]} for t, v in by_token.items()],
        "by_door": [{"door": d, "requests": n} for d, n in sorted(by_door.items())],
        "by_status": [{"status": s, "requests": n} for s, n in sorted(by_status.items())],
        "rows": [
            {"day": r["day"].isoformat(), "token_id": r["token_id"], "door": r["door"],
             "status": r["status"], "requests": int(r["n"])}
            for r in rows
        ],
        "month": month,
        "quotas": quotas,
    }
