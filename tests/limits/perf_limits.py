"""The rate limiter's cost: single-record GET req/s with limits on vs off, same run.

Run: ``.venv/bin/python -m tests.limits.perf_limits [--seconds 3] [--rounds 3]``

Starts PostgreSQL, Temporal and two API processes (``WDS_RATE_LIMITS=true`` and
``false``) on one database, then alternates short load phases between them so machine
noise hits both alike. The load is spread over 8 business-plan workspaces with 2 tokens
each (one token per client worker) so no request is refused: every phase pays the full
limiter path (workspace window + token window + headers) without measuring 429s.
Prints req/s per phase and the on/off ratio of the medians (target >= 0.90), and the
limiter's own cost per request measured in-process (immune to the HTTP noise of a busy
machine): the on/off difference is exactly that cost.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx

from tests.conftest import Services, start_api
from wds.runtime import Postgres, TemporalDev, free_port

WORKSPACES = 8
TOKENS_PER_WORKSPACE = 2


def _setup(base_url: str, admin_key: str) -> list[tuple[str, str]]:
    """(token, record URL path) per client worker."""
    out = []
    with httpx.Client(base_url=base_url, timeout=60) as c:
        admin = {"Authorization": f"Bearer {admin_key}"}
        for i in range(WORKSPACES):
            ws = c.post("/functions/v1/admin/workspaces", json={"name": f"perf{i}", "plan": "business"},
                        headers=admin).json()["id"]
            tokens = [c.post(f"/functions/v1/admin/workspaces/{ws}/tokens", headers=admin,
                             json={"type": "vibe_mcp", "name": f"t{j}"}).json()["token"]
                      for j in range(TOKENS_PER_WORKSPACE)]
            auth = {"Authorization": f"Bearer {tokens[0]}"}
            t = c.post("/functions/v1/rest-api/tables", headers=auth, json={
                "name": "P", "columns": [{"name": "Title", "type": "text"}, {"name": "N", "type": "number"}]}).json()
            rec = c.post(f"/functions/v1/rest-api/tables/{t['id']}/records", headers=auth,
                         json={"fields": {"Title": "x", "N": 1}}).json()
            out += [(tok, f"/functions/v1/rest-api/tables/{t['id']}/records/{rec['id']}") for tok in tokens]
    return out


async def _phase(base_url: str, workers: list[tuple[str, str]], seconds: float) -> tuple[float, int]:
    done = errors = 0
    deadline = time.perf_counter() + seconds

    async def worker(session: aiohttp.ClientSession, token: str, path: str) -> None:
        nonlocal done, errors
        headers = {"Authorization": f"Bearer {token}"}
        while time.perf_counter() < deadline:
            async with session.get(base_url + path, headers=headers) as r:
                await r.read()
                if r.status == 200:
                    done += 1
                else:
                    errors += 1

    start = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=len(workers))) as session:
        await asyncio.gather(*(worker(session, tok, path) for tok, path in workers))
    return done / (time.perf_counter() - start), errors


async def _limiter_cost(n: int = 20_000) -> float:
    """Microseconds per :meth:`RateLimiter.check` (memory storage), never refusing."""
    from api.services.limits import RateLimiter
    from storage.access import Principal, TokenType

    limiter = RateLimiter(redis_url=None)
    principals = [Principal(token_id=i, workspace_id=i % WORKSPACES, type=TokenType.VIBE_MCP, profile_id=None,
                            plan="business", read_only=False, expires_at=None) for i in range(16)]
    start = time.perf_counter()
    for i in range(n):
        await limiter.check(principals[i % 16])
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wds-perf-limits-"))
    pg = Postgres(tmp / "pg", port=free_port(), fast=True)
    temporal = TemporalDev(tmp / "temporal", port=free_port(), headless=True)
    pg.start()
    temporal.start()
    services = Services(pg, temporal, tmp, admin_key=secrets.token_urlsafe(24), secret_key=secrets.token_urlsafe(32))
    on = start_api(services, name="on", WDS_RATE_LIMITS="true", WDS_LOG_LEVEL="error")
    off = start_api(services, name="off", WDS_RATE_LIMITS="false", WDS_LOG_LEVEL="error")
    try:
        workers = _setup(on.base_url, services.admin_key)
        asyncio.run(_phase(off.base_url, workers, 1.0))  # warm both
        asyncio.run(_phase(on.base_url, workers, 1.0))
        rates: dict[str, list[float]] = {"on": [], "off": []}
        for _ in range(args.rounds):
            for name, proc in (("off", off), ("on", on)):
                rate, errors = asyncio.run(_phase(proc.base_url, workers, args.seconds))
                rates[name].append(rate)
                print(f"limits {name:>3}: {rate:8.0f} req/s  ({errors} non-200)")
        ratio = statistics.median(rates["on"]) / statistics.median(rates["off"])
        print(f"single-record GET, limits on / off (medians): {ratio:.1%} (target >= 90%)")
        cost = asyncio.run(_limiter_cost())
        per_request = 1e6 / statistics.median(rates["off"])
        print(f"limiter cost in-process: {cost:.1f} us per request = {cost / per_request:.1%} of a "
              f"{per_request:.0f} us request (the expected on/off ratio is {1 - cost / per_request:.1%})")
    finally:
        on.stop()
        off.stop()
        temporal.stop()
        pg.stop()


if __name__ == "__main__":
    main()
