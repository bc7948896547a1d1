"""Temporal stopped for 20 s under writes: every write succeeds and no pipeline is lost.

Creates of formula columns compute them in the API (their runs are recorded in Temporal
from the outbox once it is back); edits run as workflows, queued meanwhile."""

from __future__ import annotations

import threading
import time

import httpx
import psycopg

from tests.conftest import start_api
from wds.runtime import TemporalDev, free_port


def test_no_pipeline_is_lost_while_temporal_is_down(services, admin):
    temporal = TemporalDev(services.tmp / "temporal-outage", port=free_port(), headless=True)
    temporal.start()
    api = start_api(services, name="api-outage", WDS_TEMPORAL_ADDRESS=temporal.address,
                    WDS_TASK_QUEUE="outage-test")
    try:
        ws = admin.post("/workspaces", json={"name": "outage", "plan": "pro"}).json()
        token = admin.post(f"/workspaces/{ws['id']}/tokens", json={"type": "vibe_mcp", "name": "b"}).json()["token"]
        c = httpx.Client(base_url=f"{api.base_url}/functions/v1/rest-api",
                         headers={"Authorization": f"Bearer {token}"}, timeout=60)
        t = c.post("/tables", json={"name": "O", "columns": [
            {"name": "A", "type": "number"}, {"name": "B", "type": "formula", "formula": "{A} * 2"}]}).json()
        before = c.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1}}).json()
        assert before["pipeline"]["status"] == "ok" and before["fields"]["B"] == 2

        temporal.stop()
        statuses: list[str] = []
        created: list[str] = []
        errors: list[str] = []
        stop_at = time.monotonic() + 20

        def writer(n: int) -> None:
            i = 0
            with httpx.Client(base_url=c.base_url, headers=c.headers, timeout=60) as w:
                while time.monotonic() < stop_at:
                    r = w.post(f"/tables/{t['id']}/records", json={"fields": {"A": n * 1000 + i}})
                    if r.status_code != 201:
                        errors.append(r.text)
                    else:
                        # a create of formulas computes them itself; its run is recorded later
                        created.append(r.json()["pipeline"]["status"])
                        r = w.patch(f"/tables/{t['id']}/records/{r.json()['id']}",
                                    json={"fields": {"A": n * 1000 + i + 1}})
                        if r.status_code != 200:
                            errors.append(r.text)
                        else:  # an edit's run is the workflow: queued in the outbox
                            statuses.append(r.json()["pipeline"]["status"])
                    i += 1
                    time.sleep(0.2)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors[:3]
        assert len(statuses) >= 8 and set(statuses) <= {"queued", "running", "ok"}, statuses
        assert "queued" in statuses
        assert len(created) == len(statuses) and set(created) == {"ok"}, created

        temporal.start()  # same data directory: history survives
        deadline = time.monotonic() + 90
        stale: list[dict] = []
        while time.monotonic() < deadline:
            # every edit's queued run has written B for the edited A
            rows = c.get(f"/tables/{t['id']}/records", params={"limit": "1000"}).json()["records"]
            stale = [r for r in rows if r["fields"]["B"] != r["fields"]["A"] * 2]
            if not stale:
                break
            time.sleep(0.5)
        assert not stale, f"{len(stale)} records never got their pipeline: {stale[:3]}"
        assert len(rows) == len(statuses) + 1
        left = -1
        with psycopg.connect(services.pg.dsn, autocommit=True) as conn:
            while time.monotonic() < deadline:  # the relay drops its rows when its round commits
                left = conn.execute("SELECT count(*) FROM wds.outbox WHERE table_id = %s", (t["id"],)).fetchone()[0]
                if left == 0:
                    break
                time.sleep(0.5)
        assert left == 0
    finally:
        api.stop()
        temporal.stop()
