"""Backfills (issue #21): a schema change recomputes existing rows as a tracked bulk run,
and bulk runs report honestly (completed_with_errors, failed rows listed, retried)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.conftest import Workspace, start_api
from tests.faults.test_worker_kill import start_worker

FINAL = {"completed", "completed_with_errors", "failed", "superseded", "cancelled"}


def wait_run(ws: Any, run_id: str, timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    r: dict[str, Any] = {}
    while time.monotonic() < deadline:
        r = ws.api.get(f"/runs/{run_id}").json()
        if r["status"] in FINAL:
            return r
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not finish: {r}")


def fill(ws: Any, table_id: int, n: int, fields: Any = lambda i: {"A": i}) -> None:
    for start in range(0, n, 500):
        rows = [{"fields": fields(i)} for i in range(start, min(n, start + 500))]
        r = ws.api.post(f"/tables/{table_id}/records/batch", json={"rows": rows, "run_pipeline": False})
        assert r.status_code == 200, r.text


def values(ws: Any, table_id: int, column: str) -> dict[int, Any]:
    out: dict[int, Any] = {}
    offset = 0
    while True:
        page = ws.api.get(f"/tables/{table_id}/records?order=A.asc&limit=1000&offset={offset}").json()["records"]
        out.update({r["fields"]["A"]: r["fields"][column] for r in page})
        if len(page) < 1000:
            return out
        offset += 1000


def col_id(table: dict[str, Any], name: str) -> int:
    return next(c["id"] for c in table["columns"] if c["name"] == name)


def test_a_new_formula_column_is_computed_on_every_existing_row(ws):
    t = ws.create_table("New", [{"name": "A", "type": "number"}])
    fill(ws, t["id"], 1200)
    r = ws.api.post(f"/tables/{t['id']}/columns", json={"name": "Twice", "type": "formula", "formula": "{A} * 2"})
    assert r.status_code == 201, r.text
    backfill = r.json()["backfill"]
    assert backfill["total"] == 1200 and backfill["run_id"].startswith("run-")
    assert backfill["workflow_id"] == f"backfill-ws{ws.id}-t{t['id']}"
    run = wait_run(ws, backfill["run_id"])
    assert run["status"] == "completed" and run["done"] == 1200 and run["failed"] == 0 and run["kind"] == "backfill"
    assert values(ws, t["id"], "Twice") == {i: i * 2 for i in range(1200)}


def test_a_formula_edit_recomputes_rows_and_their_dependants(ws):
    t = ws.create_table("Edit", [
        {"name": "A", "type": "number"},
        {"name": "Total", "type": "formula", "formula": "{A} + 1"},
        {"name": "Label", "type": "formula", "formula": "\"T=\" & {Total}"},
    ])
    fill(ws, t["id"], 300)
    assert values(ws, t["id"], "Total")[5] is None  # written without running the pipeline
    r = ws.api.patch(f"/tables/{t['id']}/columns/{col_id(t, 'Total')}", json={"formula": "{A} * 10"})
    assert r.status_code == 200, r.text
    run = wait_run(ws, r.json()["backfill"]["run_id"])
    assert run["status"] == "completed", run
    assert values(ws, t["id"], "Total") == {i: i * 10 for i in range(300)}
    assert values(ws, t["id"], "Label") == {i: f"T={i * 10}" for i in range(300)}
    # a rename changes no value: nothing to recompute
    r = ws.api.patch(f"/tables/{t['id']}/columns/{col_id(t, 'Label')}", json={"name": "Caption"})
    assert r.status_code == 200 and r.json()["backfill"] is None
    # backfill: false opts out
    r = ws.api.patch(f"/tables/{t['id']}/columns/{col_id(t, 'Total')}", json={"formula": "{A}", "backfill": False})
    assert r.status_code == 200 and r.json()["backfill"] is None
    assert values(ws, t["id"], "Total")[7] == 70


def test_a_data_column_type_change_recomputes_the_formulas_reading_it(ws):
    t = ws.create_table("Typed", [
        {"name": "A", "type": "number"},
        {"name": "Code", "type": "number"},
        {"name": "Len", "type": "formula", "formula": "LEN({Code} & \"\")"},
    ])
    fill(ws, t["id"], 50, lambda i: {"A": i, "Code": 7})
    r = ws.api.patch(f"/tables/{t['id']}/columns/{col_id(t, 'Code')}", json={"type": "text"})
    assert r.status_code == 200, r.text
    assert r.json()["backfill"] is not None, r.json()
    assert wait_run(ws, r.json()["backfill"]["run_id"])["status"] == "completed"
    assert set(values(ws, t["id"], "Len").values()) == {1}


def test_a_table_without_rows_needs_no_backfill(ws):
    t = ws.create_table("Empty", [{"name": "A", "type": "number"}])
    r = ws.api.post(f"/tables/{t['id']}/columns", json={"name": "F", "type": "formula", "formula": "{A}"})
    assert r.status_code == 201 and r.json()["backfill"] is None


def test_the_openapi_document_shows_the_backfill_flag(ws):
    doc = ws.api.get(f"{ws.base_url}/openapi.json")
    props = doc.json()["components"]["schemas"]["ColumnIn"]["properties"]
    assert props["backfill"]["anyOf"][0]["type"] == "boolean"


def test_a_second_formula_column_after_prepared_reads_computes_every_row(services, admin):
    """The bug of issue #21: a worker's pooled connections had prepared the statement that
    reads a chunk's rows (``SELECT *``, run more than psycopg's prepare_threshold times);
    once the table gained a column (ALTER TABLE in the API process, on another
    connection), PostgreSQL refused it on every one of them ("cached plan must not change
    result type"), and the run still said completed. A worker of its own, as deployed."""
    queue = f"prep-test-{uuid.uuid4().hex[:8]}"
    worker = start_worker(services, queue, "worker-prep.log")
    api = start_api(services, name="api-prep", WDS_INPROCESS_WORKER="false", WDS_TASK_QUEUE=queue)
    try:
        w = admin.post("/workspaces", json={"name": "prep", "plan": "pro"}).json()
        token = admin.post(f"/workspaces/{w['id']}/tokens", json={"type": "vibe_mcp", "name": "b"}).json()["token"]
        ws = Workspace(w["id"], api.base_url, admin, token)
        t = ws.create_table("Prep", [{"name": "A", "type": "number"},
                                     {"name": "F1", "type": "formula", "formula": "{A} + 1"}])
        fill(ws, t["id"], 400)
        f1 = col_id(t, "F1")
        for i in range(8):  # one after another: the worker reads on the same connection
            run = ws.api.post(f"/tables/{t['id']}/run-actions", json={"column_ids": [f1], "record_ids": [i + 1]})
            assert wait_run(ws, run.json()["run_id"])["status"] == "completed"
        r = ws.api.post(f"/tables/{t['id']}/columns", json={"name": "F2", "type": "formula", "formula": "{A} * 3"})
        assert r.status_code == 201, r.text
        run = wait_run(ws, r.json()["backfill"]["run_id"])
        assert run["status"] == "completed" and run["failed"] == 0, run
        assert values(ws, t["id"], "F2") == {i: i * 3 for i in range(400)}
        # and by hand: run-actions over the new column
        f2 = r.json()["id"]
        run = wait_run(ws, ws.api.post(f"/tables/{t['id']}/run-actions", json={"column_ids": [f2]}).json()["run_id"])
        assert run["status"] == "completed" and run["done"] == 400, run
        ws.close()
    finally:
        worker.kill()
        worker.wait()
        api.stop()


def test_two_quick_edits_end_with_the_last_formula(ws):
    t = ws.create_table("Quick", [{"name": "A", "type": "number"}, {"name": "F", "type": "formula", "formula": "{A}"}])
    fill(ws, t["id"], 3000)
    f = col_id(t, "F")
    first = ws.api.patch(f"/tables/{t['id']}/columns/{f}", json={"formula": "{A} + 100"}).json()["backfill"]
    second = ws.api.patch(f"/tables/{t['id']}/columns/{f}", json={"formula": "{A} + 200"}).json()["backfill"]
    assert first["workflow_id"] == second["workflow_id"]
    done = wait_run(ws, second["run_id"])
    assert done["status"] == "completed"
    before = ws.api.get(f"/runs/{first['run_id']}").json()
    assert before["status"] in ("superseded", "completed"), before
    if before["status"] == "superseded":
        assert before["superseded_by"] == second["run_id"]
    assert values(ws, t["id"], "F") == {i: i + 200 for i in range(3000)}


def test_a_run_with_failing_rows_ends_completed_with_errors_listing_them(ws):
    t = ws.create_table("Div", [{"name": "A", "type": "number"}])
    fill(ws, t["id"], 250, lambda i: {"A": i % 50})  # A = 0 on 5 rows
    r = ws.api.post(f"/tables/{t['id']}/columns", json={"name": "Inv", "type": "formula", "formula": "100 / {A}"})
    run = wait_run(ws, r.json()["backfill"]["run_id"])
    assert run["status"] == "completed_with_errors", run
    assert run["failed"] == 5 and run["done"] == 245
    rows = ws.api.get(f"/tables/{t['id']}/records?A=eq.0").json()["records"]
    assert sorted(x["id"] for x in run["failed_rows"]) == sorted(x["id"] for x in rows)
    assert all("Inv" in x["errors"] for x in run["failed_rows"])


class Flaky(ThreadingHTTPServer):
    """A stand-in API: ``/fail/<n>`` always answers 500 when n is odd; ``/once/<n>``
    answers 500 to the first call for each n, then 200."""

    daemon_threads = True

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: Flaky

    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        with self.server.lock:
            self.server.calls[self.path] += 1
            calls = self.server.calls[self.path]
        _, mode, raw = self.path.split("/")
        n = int(float(raw))
        bad = n % 2 == 1 if mode == "fail" else calls == 1
        self.send_response(500 if bad else 200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps({"n": n}).encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def flaky() -> Iterator[str]:
    server = Flaky()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_side_effecting_columns_backfill_only_when_asked(ws, flaky):
    t = ws.create_table("Http", [{"name": "A", "type": "number"}])
    fill(ws, t["id"], 20)
    r = ws.api.post(f"/tables/{t['id']}/columns", json={
        "name": "Got", "type": "http_request", "config": {"method": "GET", "url": flaky + "/ok/{{ A * 2 }}"}})
    assert r.status_code == 201 and r.json()["backfill"] is None
    assert set(values(ws, t["id"], "Got").values()) == {None}  # existing rows untouched
    r = ws.api.post(f"/tables/{t['id']}/columns", json={
        "name": "Fetched", "type": "http_request", "backfill": True,
        "config": {"method": "GET", "url": flaky + "/fail/{{ A * 2 }}"}})  # even: always 200
    assert r.status_code == 201, r.text
    run = wait_run(ws, r.json()["backfill"]["run_id"])
    assert run["status"] == "completed", run
    assert values(ws, t["id"], "Fetched") == {i: {"n": i * 2} for i in range(20)}


def test_an_http_column_failing_for_some_rows_lists_them(ws, flaky):
    t = ws.create_table("HttpBad", [{"name": "A", "type": "number"}])
    fill(ws, t["id"], 10)
    r = ws.api.post(f"/tables/{t['id']}/columns", json={
        "name": "Got", "type": "http_request", "backfill": True,
        "config": {"method": "GET", "url": flaky + "/fail/{{ A }}"}})
    run = wait_run(ws, r.json()["backfill"]["run_id"])
    assert run["status"] == "completed_with_errors" and run["failed"] == 5 and run["done"] == 5, run
    odd = {x["id"] for x in ws.api.get(f"/tables/{t['id']}/records?A=in.(1,3,5,7,9)").json()["records"]}
    assert {x["id"] for x in run["failed_rows"]} == odd
    assert all("500" in x["errors"]["Got"] for x in run["failed_rows"])


def test_a_transient_failure_is_retried_within_the_run(ws, flaky):
    t = ws.create_table("HttpOnce", [{"name": "A", "type": "number"}])
    fill(ws, t["id"], 6)
    r = ws.api.post(f"/tables/{t['id']}/columns", json={
        "name": "Got", "type": "http_request", "config": {"method": "GET", "url": flaky + "/once/{{ A }}"}})
    assert r.json()["backfill"] is None
    run = ws.api.post(f"/tables/{t['id']}/run-actions", json={"column_ids": [r.json()["id"]]}).json()
    done = wait_run(ws, run["run_id"])
    assert done["status"] == "completed" and done["done"] == 6 and done["failed"] == 0, done
    assert values(ws, t["id"], "Got") == {i: {"n": i} for i in range(6)}


def test_an_explicit_backfill_over_the_automation_quota_does_not_start(make_workspace, flaky):
    ws = make_workspace(plan="free")  # 1,000 automation runs a month
    t = ws.create_table("Quota", [{"name": "A", "type": "number"}])
    fill(ws, t["id"], 1001)
    r = ws.api.post(f"/tables/{t['id']}/columns", json={
        "name": "Got", "type": "http_request", "backfill": True,
        "config": {"method": "GET", "url": flaky + "/ok/{{ A }}"}})
    assert r.status_code == 201, r.text  # the column stands
    assert r.json()["backfill"] == {"run_id": None, "total": 1001, "status": "not_started",
                                    "error": r.json()["backfill"]["error"], "code": "PLAN_LIMIT_AUTOMATION_RUNS"}
    # a formula is not charged: it backfills
    r = ws.api.post(f"/tables/{t['id']}/columns", json={"name": "F", "type": "formula", "formula": "{A} + 1"})
    assert wait_run(ws, r.json()["backfill"]["run_id"])["status"] == "completed"
