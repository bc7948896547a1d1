"""Temporal frozen (SIGSTOP: connections open, nothing answers): run-actions and schedule
calls answer 503 UNAVAILABLE once their RPC deadline passes, change nothing, and hold no
pooled database connection meanwhile (other requests keep answering)."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import psycopg

from tests.conftest import start_api
from wds.runtime import TemporalDev, free_port


def test_frozen_temporal_gives_503_and_leaves_the_pool_free(services, admin):
    temporal = TemporalDev(services.tmp / "temporal-frozen", port=free_port(), headless=True)
    temporal.start()
    # a small pool: calls that held a connection while waiting on Temporal would exhaust it
    api = start_api(services, name="api-frozen", WDS_TEMPORAL_ADDRESS=temporal.address,
                    WDS_TASK_QUEUE="frozen-test", WDS_TEMPORAL_RPC_TIMEOUT_S="2", WDS_DB_POOL_MAX="4",
                    WDS_DB_CONNECTIONS_PER_WORKSPACE="4")
    frozen = False
    try:
        ws = admin.post("/workspaces", json={"name": "frozen", "plan": "pro"}).json()
        token = admin.post(f"/workspaces/{ws['id']}/tokens", json={"type": "vibe_mcp", "name": "b"}).json()["token"]
        c = httpx.Client(base_url=f"{api.base_url}/functions/v1/rest-api",
                         headers={"Authorization": f"Bearer {token}"}, timeout=30)
        t = c.post("/tables", json={"name": "F", "columns": [
            {"name": "A", "type": "number"}, {"name": "B", "type": "formula", "formula": "{A} * 2"}]}).json()
        c.post(f"/tables/{t['id']}/records/batch", json={"rows": [{"A": i} for i in range(3)], "run_pipeline": False})
        base = f"/tables/{t['id']}/schedules"
        s = c.post(base, json={"name": "yearly", "cron": "0 0 1 1 *", "paused": True})
        assert s.status_code == 201, s.text
        sid = s.json()["id"]

        assert temporal.proc is not None
        os.kill(temporal.proc.pid, signal.SIGSTOP)
        frozen = True
        calls = [
            ("POST", f"/tables/{t['id']}/run-actions", {"filters": {"A": "gte.0"}}),
            ("POST", f"/tables/{t['id']}/run-actions", {"record_ids": [1, 2]}),
            ("PATCH", f"{base}/{sid}", {"name": "hourly", "interval_seconds": 3600}),
            ("PATCH", f"{base}/{sid}", {"paused": False}),
            ("POST", f"{base}/{sid}/unpause", None),
            ("POST", f"{base}/{sid}/trigger", None),
            ("POST", base, {"name": "new one", "interval_seconds": 60}),
            ("GET", f"{base}/{sid}", None),
            ("DELETE", f"{base}/{sid}", None),
        ]
        answers: list[httpx.Response | BaseException] = [None] * len(calls)  # type: ignore[list-item]
        started = threading.Barrier(len(calls) + 1)

        def call(i: int) -> None:
            method, path, body = calls[i]
            with httpx.Client(base_url=c.base_url, headers=c.headers, timeout=30) as w:
                started.wait()
                try:
                    answers[i] = w.request(method, path, json=body)
                except BaseException as exc:  # noqa: BLE001 (reported below)
                    answers[i] = exc

        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(calls))]
        for th in threads:
            th.start()
        started.wait()
        # while nine calls wait on Temporal, plain data requests still get a connection
        reads = [c.get(f"/tables/{t['id']}/records", params={"limit": "5"}) for _ in range(5)]
        for th in threads:
            th.join()
        assert [r.status_code for r in reads] == [200] * 5, [r.text for r in reads]
        for (method, path, _), r in zip(calls, answers):
            assert isinstance(r, httpx.Response), (method, path, r)
            assert r.status_code == 503 and r.json()["code"] == "UNAVAILABLE", (method, path, r.text)

        # nothing changed: the schedule kept its name and state, no second one was made,
        # and the run-actions runs that could not start are not left "running"
        listed = c.get(base).json()
        assert [(x["id"], x["name"], x["paused"], x["cron"]) for x in listed] == [(sid, "yearly", True, "0 0 1 1 *")]
        with psycopg.connect(services.pg.dsn) as conn:
            statuses = [r[0] for r in conn.execute(
                "SELECT status FROM wds.runs WHERE table_id = %s AND kind = 'run_actions'", (t["id"],))]
        assert statuses == ["failed", "failed"], statuses

        os.kill(temporal.proc.pid, signal.SIGCONT)
        frozen = False
        # Temporal back: the same calls work again once it has worked off the backlog the
        # frozen calls left (it answers them first; a client told "retry shortly" retries)
        deadline = time.monotonic() + 60
        while True:
            r = c.patch(f"{base}/{sid}", json={"name": "hourly", "interval_seconds": 3600})
            if r.status_code != 503 or time.monotonic() > deadline:
                break
            assert r.json()["code"] == "UNAVAILABLE", r.text
            time.sleep(1)
        assert r.status_code == 200 and r.json()["name"] == "hourly", r.text
        assert c.get(f"{base}/{sid}").json()["name"] == "hourly"
    finally:
        if frozen and temporal.proc is not None:
            os.kill(temporal.proc.pid, signal.SIGCONT)
        api.stop()
        temporal.stop()
