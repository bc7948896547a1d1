"""Two API processes and two standalone workers behind one PostgreSQL and one Temporal:
results are consistent whichever process serves a call, one rate limit holds across both
API processes (Redis), and realtime events cross processes."""

from __future__ import annotations

import threading
import uuid

import httpx

from tests.conftest import start_api
from tests.limits.conftest import redis_url  # noqa: F401 (a real Redis server, or a visible skip)
from tests.realtime.conftest import changes, open_ws, subscribe


def test_two_apis_and_two_workers_behave_as_one_service(services, admin, redis_url):  # noqa: F811
    queue = f"pair-{uuid.uuid4().hex[:8]}"
    env = {"WDS_TASK_QUEUE": queue, "WDS_REDIS_URL": redis_url, "WDS_RATE_LIMITS": "true"}
    workers = [services.start_worker(f"pair-worker-{i}.log", **env) for i in range(2)]
    apis = [start_api(services, name=f"pair-api-{i}", WDS_INPROCESS_WORKER="false", **env) for i in range(2)]
    try:
        ws = admin.post("/workspaces", json={"name": "pair", "plan": "pro"}).json()
        token = admin.post(f"/workspaces/{ws['id']}/tokens", json={"type": "vibe_mcp", "name": "b"}).json()["token"]
        clients = [httpx.Client(base_url=f"{a.base_url}/functions/v1/rest-api",
                                headers={"Authorization": f"Bearer {token}"}, timeout=60) for a in apis]
        t = clients[0].post("/tables", json={"name": "Pair", "columns": [
            {"name": "A", "type": "number"}, {"name": "B", "type": "formula", "formula": "{A} * 2"}]}).json()

        # realtime: a client of API 2 sees a write made through API 1
        with open_ws(apis[1].base_url, token) as conn:
            subscribe(conn, t["id"], events=["INSERT"])
            first = clients[0].post(f"/tables/{t['id']}/records", json={"fields": {"A": 1}}).json()
            event = changes(conn, 1)[0]
        assert event["record"]["id"] == first["id"] and event["record"]["fields"]["A"] == 1

        # consistent results: writes spread over both APIs; both workers poll the queue
        made: list[dict] = []
        lock = threading.Lock()

        def write(i: int) -> None:
            r = clients[i % 2].post(f"/tables/{t['id']}/records", json={"fields": {"A": i}})
            with lock:
                made.append(r.json())

        threads = [threading.Thread(target=write, args=(i,)) for i in range(2, 32)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert all(m["pipeline"]["status"] == "ok" and m["fields"]["B"] == m["fields"]["A"] * 2 for m in made)
        views = [c.get(f"/tables/{t['id']}/records", params={"limit": "1000", "order": "id.asc"}).json()["records"]
                 for c in clients]
        assert views[0] == views[1] and len(views[0]) == 31
        assert all(w.poll() is None for w in workers)  # both workers stayed up

        # one rate limit across both processes: a free workspace gets exactly 60 a minute
        free = admin.post("/workspaces", json={"name": "pair-free", "plan": "free"}).json()
        ftoken = admin.post(f"/workspaces/{free['id']}/tokens", json={"type": "rest_api", "name": "f"}).json()["token"]
        statuses = []
        for i in range(70):
            r = httpx.get(f"{apis[i % 2].base_url}/functions/v1/rest-api/tables",
                          headers={"Authorization": f"Bearer {ftoken}"})
            statuses.append(r.status_code)
        assert statuses.count(200) == 60 and statuses.count(429) == 10, statuses
    finally:
        for a in apis:
            a.stop()
        for w in workers:
            w.terminate()
            w.wait(timeout=15)
