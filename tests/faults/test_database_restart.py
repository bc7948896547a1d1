"""PostgreSQL restarted under a 16-client load: 503 UNAVAILABLE during the outage (never a
hang past the configured timeout, never a 500), and full recovery within 5 s."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx

from tests.conftest import start_api
from wds.runtime import Postgres, free_port

DB_TIMEOUT_S = 2.0


def test_api_recovers_from_a_database_restart(services):
    pg = Postgres(services.tmp / "pg-restart", port=free_port(), fast=True)
    pg.start()
    api = start_api(services, name="api-dbrestart", WDS_DATABASE_URL=pg.dsn, WDS_TASK_QUEUE="dbrestart",
                    WDS_DB_TIMEOUT_S=str(DB_TIMEOUT_S), WDS_RATE_LIMITS="false")
    try:
        admin = httpx.Client(base_url=f"{api.base_url}/functions/v1/admin",
                             headers={"Authorization": f"Bearer {services.admin_key}"}, timeout=30)
        ws = admin.post("/workspaces", json={"name": "restart", "plan": "enterprise"}).json()
        token = admin.post(f"/workspaces/{ws['id']}/tokens", json={"type": "vibe_mcp", "name": "b"}).json()["token"]
        c = httpx.Client(base_url=f"{api.base_url}/functions/v1/rest-api", headers={"Authorization": f"Bearer {token}"})
        t = c.post("/tables", json={"name": "R", "columns": [{"name": "A", "type": "number"}]}).json()
        rid = c.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1}}).json()["id"]
        url = f"{api.base_url}/functions/v1/rest-api/tables/{t['id']}/records/{rid}"
        results: list[tuple[float, int, float]] = []  # (start time, status, duration)
        stop = time.monotonic() + 16
        back_up = {"at": None}

        async def client() -> None:
            async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as h:
                while time.monotonic() < stop:
                    t0 = time.monotonic()
                    try:
                        status = (await h.get(url)).status_code
                    except httpx.HTTPError:
                        status = -1
                    results.append((t0, status, time.monotonic() - t0))
                    await asyncio.sleep(0.01)

        def restart() -> None:
            time.sleep(3)
            pg.stop()
            time.sleep(2)  # a real outage, not just a blip
            pg.start()
            back_up["at"] = time.monotonic()

        th = threading.Thread(target=restart)
        th.start()

        async def load() -> None:
            await asyncio.gather(*(client() for _ in range(16)))

        asyncio.run(load())
        th.join()
        assert back_up["at"] is not None
        statuses = {s for _, s, _ in results}
        assert statuses <= {200, 503}, statuses  # never a 500 or a dropped connection
        assert any(s == 503 for _, s, _ in results)
        assert max(d for _, _, d in results) < DB_TIMEOUT_S + 3  # no hang past the timeout
        ok_after = [t0 for t0, s, _ in results if s == 200 and t0 > back_up["at"]]
        assert ok_after, "no successful request after the restart"
        recovered = min(ok_after) - back_up["at"]
        failures_late = [t0 for t0, s, _ in results if s != 200 and t0 > back_up["at"] + 5]
        assert recovered < 5 and not failures_late, (recovered, len(failures_late))
        print(f"recovery {recovered:.2f}s after the server was back; "
              f"{sum(1 for _, s, _ in results if s == 503)} x 503 of {len(results)} requests")
    finally:
        if "th" in locals():  # the restart thread may still be starting PostgreSQL
            th.join(timeout=60)
        api.stop()
        pg.stop()
