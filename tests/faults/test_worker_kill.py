"""A worker killed with SIGKILL in the middle of a run-actions: every row still finishes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from tests.conftest import start_api


def start_worker(services, queue: str, log_name: str) -> subprocess.Popen[bytes]:
    return services.start_worker(log_name, WDS_TASK_QUEUE=queue)


class Receiver(ThreadingHTTPServer):
    """A well-behaved webhook receiver: it records every call and its Idempotency-Key."""

    daemon_threads = True

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.values: dict[str, int] = {}
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:  # noqa: N802 (http.server API)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        key = self.headers.get("Idempotency-Key") or ""
        with self.server.lock:
            self.server.calls[key] += 1
            self.server.values[key] = json.loads(body)["a"]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"ok": true}')

    def log_message(self, *args: object) -> None:
        pass


def test_run_actions_survives_a_killed_worker(services, admin):
    receiver = Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{receiver.server_address[1]}/hook"
    queue = f"kill-test-{uuid.uuid4().hex[:8]}"
    worker = start_worker(services, queue, "worker-a.log")
    api = start_api(services, name="api-noworker", WDS_INPROCESS_WORKER="false", WDS_TASK_QUEUE=queue)
    try:
        ws = admin.post("/workspaces", json={"name": "kill", "plan": "pro"}).json()
        token = admin.post(f"/workspaces/{ws['id']}/tokens", json={"type": "vibe_mcp", "name": "b"}).json()["token"]
        c = httpx.Client(base_url=f"{api.base_url}/functions/v1/rest-api", headers={"Authorization": f"Bearer {token}"}, timeout=60)
        t = c.post("/tables", json={"name": "K", "columns": [
            {"name": "A", "type": "number"},
            {"name": "Pause", "type": "delay", "config": {"seconds": 1}},
            {"name": "B", "type": "formula", "formula": "IF({Pause}, {A} * 2, 0)"},
            {"name": "Hook", "type": "http_request",
             "config": {"method": "POST", "url": hook, "body": '{"a": {{ A }}}', "depends_on": ["Pause"]}},
        ]}).json()
        for start in range(0, 2000, 500):
            r = c.post(f"/tables/{t['id']}/records/batch",
                       json={"rows": [{"fields": {"A": i}} for i in range(start, start + 500)], "run_pipeline": False})
            assert r.status_code == 200
        run = c.post(f"/tables/{t['id']}/run-actions", json={"filters": {"A": "gte.0"}}).json()
        assert run["total"] == 2000
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            prog = c.get(f"/runs/{run['run_id']}").json()
            if prog["done"] > 0:
                break
            time.sleep(0.05)
        assert 0 < prog["done"] < 2000, prog  # caught it mid-run
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        worker = start_worker(services, queue, "worker-b.log")
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            prog = c.get(f"/runs/{run['run_id']}").json()
            if prog["status"] == "completed":
                break
            time.sleep(0.5)
        assert prog["status"] == "completed" and prog["done"] == 2000 and prog["failed"] == 0, prog
        r = c.get(f"/tables/{t['id']}/records", params={"B": "is.null"}, headers={"Prefer": "count=exact"})
        assert r.headers["X-Total-Count"] == "0"
        r = c.get(f"/tables/{t['id']}/records", params={"A": "eq.1999"})
        assert r.json()["records"][0]["fields"]["B"] == 3998
        # side effects: every row's call arrived, and retries after the kill reused their
        # key, so a receiver deduplicating by Idempotency-Key applied each effect once
        assert "" not in receiver.calls
        assert sorted(receiver.values.values()) == list(range(2000))
        assert len(receiver.calls) == 2000
        print(f"receiver: {sum(receiver.calls.values())} calls for 2000 keys "
              f"({sum(receiver.calls.values()) - 2000} retried)")
    finally:
        receiver.shutdown()
        worker.kill()
        api.stop()


def test_a_backfill_survives_a_killed_worker(services, admin):
    """A formula column's backfill (chunks as local activities) caught mid-run by SIGKILL:
    another worker resumes it and every row ends computed, the run ``completed``."""
    queue = f"kill-bf-{uuid.uuid4().hex[:8]}"
    worker = start_worker(services, queue, "worker-bf-a.log")
    api = start_api(services, name="api-bf-noworker", WDS_INPROCESS_WORKER="false", WDS_TASK_QUEUE=queue)
    try:
        ws = admin.post("/workspaces", json={"name": "kill-bf", "plan": "pro"}).json()
        token = admin.post(f"/workspaces/{ws['id']}/tokens", json={"type": "vibe_mcp", "name": "b"}).json()["token"]
        c = httpx.Client(base_url=f"{api.base_url}/functions/v1/rest-api", headers={"Authorization": f"Bearer {token}"}, timeout=60)
        t = c.post("/tables", json={"name": "KB", "columns": [{"name": "A", "type": "number"}]}).json()
        total = 60_000
        for start in range(0, total, 500):
            r = c.post(f"/tables/{t['id']}/records/batch",
                       json={"rows": [{"A": i} for i in range(start, start + 500)], "run_pipeline": False})
            assert r.status_code == 200, r.text
        col = c.post(f"/tables/{t['id']}/columns", json={"name": "B", "type": "formula", "formula": "{A} * 2 + 1"})
        assert col.status_code == 201, col.text
        run = col.json()["backfill"]
        assert run["total"] == total
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            prog = c.get(f"/runs/{run['run_id']}").json()
            if prog["done"] > 0:
                break
            time.sleep(0.02)
        assert 0 < prog["done"] < total, prog  # caught it mid-run
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        worker = start_worker(services, queue, "worker-bf-b.log")
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            prog = c.get(f"/runs/{run['run_id']}").json()
            if prog["status"] != "running":
                break
            time.sleep(0.5)
        assert prog["status"] == "completed" and prog["done"] == total and prog["failed"] == 0, prog
        r = c.get(f"/tables/{t['id']}/records", params={"B": "is.null"}, headers={"Prefer": "count=exact"})
        assert r.headers["X-Total-Count"] == "0"
        r = c.get(f"/tables/{t['id']}/records", params={"A": f"eq.{total - 1}"})
        assert r.json()["records"][0]["fields"]["B"] == (total - 1) * 2 + 1
    finally:
        worker.kill()
        api.stop()
