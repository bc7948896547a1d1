"""A run's values land only while what they were computed from is what the table holds
(storage/guards.py).

Found by an exploratory pass: the slower run of an older write overwrote the newer one's
values (every time); a formula edited while a write's run was in flight kept the old
formula's value for good (the backfill had already passed the row); concurrent writes
during backfills left rows whose ``G`` did not follow from their ``F``, every run saying
``completed``.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.pipelines.test_backfill import wait_run


class _Slow(BaseHTTPRequestHandler):
    """``/slow/<s>``: answers ``{"slept": s}`` after ``s`` seconds (a stand-in API)."""

    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        seconds = float(self.path.rsplit("/", 1)[1])
        time.sleep(seconds)
        body = json.dumps({"slept": seconds}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def _in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    return thread, out


def _record(ws: Any, table_id: int, rid: int) -> dict[str, Any]:
    return ws.api.get(f"/tables/{table_id}/records/{rid}").json()["fields"]


def test_the_slower_run_of_an_older_write_does_not_overwrite_a_newer_one(ws, slow):
    t = ws.create_table("Order", [
        {"name": "N", "type": "number"},
        {"name": "Slow", "type": "http_request", "config": {"method": "GET", "url": slow + "/slow/{{ N }}"}},
        {"name": "F", "type": "formula", "formula": "{N} * 2"},
    ])
    url = f"/tables/{t['id']}/records"
    rid = ws.api.post(url, json={"fields": {"N": 0}}).json()["id"]

    def patch(n: int) -> dict[str, Any]:
        with ws.client(ws.builder_token) as c:
            r = c.patch(f"{url}/{rid}", json={"fields": {"N": n}}, timeout=30)
            assert r.status_code == 200, r.text
            return r.json()

    older, _ = _in_thread(lambda: patch(3))  # its run takes 3 s
    time.sleep(0.5)
    newer = patch(1)  # its run takes 1 s and ends first
    older.join()
    assert newer["fields"]["F"] == 2 and newer["fields"]["Slow"] == {"slept": 1.0}
    final = _record(ws, t["id"], rid)
    assert final["N"] == 1
    assert final["F"] == 2, final
    assert final["Slow"] == {"slept": 1.0}, final


def _change_under_a_running_write(ws: Any, slow: str, name: str, change: Any) -> tuple[dict[str, Any], int, Any]:
    """A table N, M, Slow (2 s of HTTP for N = 2) and F = {M} * 2; a write of N = 2, M = 5
    whose run is in flight when ``change(table)`` (a schema change) is made, 0.7 s in.
    Returns (the table, the record id, ``change``'s answer), once the write has answered."""
    t = ws.create_table(name, [
        {"name": "N", "type": "number"},
        {"name": "M", "type": "number"},
        {"name": "Slow", "type": "http_request", "config": {"method": "GET", "url": slow + "/slow/{{ N }}"}},
        {"name": "F", "type": "formula", "formula": "{M} * 2"},
    ])
    url = f"/tables/{t['id']}/records"
    rid = ws.api.post(url, json={"fields": {"N": 0, "M": 1}}).json()["id"]
    with ws.client(ws.builder_token) as c:
        writer, _ = _in_thread(lambda: c.patch(f"{url}/{rid}", json={"fields": {"N": 2, "M": 5}}, timeout=30))
        time.sleep(0.7)
        answer = change(t)
        writer.join()
    return t, rid, answer


def _column_id(table: dict[str, Any], name: str) -> int:
    return next(c["id"] for c in table["columns"] if c["name"] == name)


def test_a_formula_edited_while_a_write_runs_keeps_the_new_formulas_value(ws, slow):
    t, rid, r = _change_under_a_running_write(ws, slow, "Edit", lambda t: ws.api.patch(
        f"/tables/{t['id']}/columns/{_column_id(t, 'F')}", json={"formula": "{M} * 3"}))
    assert r.status_code == 200, r.text
    backfill = (r.json().get("backfill") or {}).get("run_id")
    if backfill:
        assert wait_run(ws, backfill)["status"] == "completed"
    final = _record(ws, t["id"], rid)
    assert final["M"] == 5 and final["Slow"] == {"slept": 2.0}
    assert final["F"] == 15, final


def test_a_column_deleted_under_a_running_write_leaves_its_readers_cleared(ws, slow):
    t, rid, r = _change_under_a_running_write(ws, slow, "Gone", lambda t: ws.api.delete(
        f"/tables/{t['id']}/columns/{_column_id(t, 'M')}", params={"force": "true"}))
    assert r.status_code == 200, r.text
    final = _record(ws, t["id"], rid)
    assert "M" not in final and final["Slow"] == {"slept": 2.0}
    assert final["F"] is None, final  # broken: cleared, never the value of the deleted input


def test_concurrent_writes_during_backfills_leave_every_row_consistent(ws):
    """8 writers change N on 120 rows while G's formula is edited three times: when all
    runs are over, every row's F is 2N and its G is F plus the last formula's constant."""
    t = ws.create_table("Storm", [
        {"name": "N", "type": "number"},
        {"name": "F", "type": "formula", "formula": "{N} * 2"},
        {"name": "G", "type": "formula", "formula": "{F} + 1"},
    ])
    url = f"/tables/{t['id']}/records"
    r = ws.api.post(f"{url}/batch", json={"rows": [{"fields": {"N": i}} for i in range(120)]})
    assert r.status_code == 200, r.text
    ids = [r["id"] for r in ws.api.get(url, params={"limit": "1000"}).json()["records"]]
    g_id = next(c["id"] for c in t["columns"] if c["name"] == "G")
    stop = time.monotonic() + 6
    failures: list[str] = []

    def writer(seed: int) -> None:
        rnd = random.Random(seed)
        with ws.client(ws.builder_token) as c:
            while time.monotonic() < stop:
                r = c.patch(f"{url}/{rnd.choice(ids)}", json={"fields": {"N": rnd.randrange(1_000_000)}}, timeout=30)
                if r.status_code != 200:
                    failures.append(r.text)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    runs = []
    for k in (2, 3, 4):
        time.sleep(1.5)
        r = ws.api.patch(f"/tables/{t['id']}/columns/{g_id}", json={"formula": f"{{F}} + {k}"})
        assert r.status_code == 200, r.text
        runs.append(r.json()["backfill"]["run_id"])
    for th in threads:
        th.join()
    assert not failures, failures[:3]
    for run_id in runs:
        assert wait_run(ws, run_id)["status"] in ("completed", "superseded")
    rows = ws.api.get(url, params={"limit": "1000"}).json()["records"]
    bad = [r["fields"] for r in rows if r["fields"]["F"] != r["fields"]["N"] * 2 or r["fields"]["G"] != r["fields"]["F"] + 4]
    assert not bad, bad[:5]


def test_a_forced_delete_recomputes_the_readers_of_the_columns_it_broke(ws):
    """N → F = {N}*2 → G = {F}+1: deleting N with force marks F broken and clears it; G's
    values came from F's and are recomputed (G read 11 for ever, status ok). Every row
    ends as a new record does: F null with its reason, G skipped (null)."""
    t = ws.create_table("Chain", [
        {"name": "N", "type": "number"},
        {"name": "F", "type": "formula", "formula": "{N} * 2"},
        {"name": "G", "type": "formula", "formula": "{F} + 1"},
    ])
    url = f"/tables/{t['id']}/records"
    rid = ws.api.post(url, json={"fields": {"N": 5}}).json()["id"]
    assert _record(ws, t["id"], rid)["G"] == 11
    n_id = next(c["id"] for c in t["columns"] if c["name"] == "N")
    r = ws.api.delete(f"/tables/{t['id']}/columns/{n_id}", params={"force": "true"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [d["name"] for d in body["detached"]] == ["F"]
    assert body["backfill"] is not None, body
    run = wait_run(ws, body["backfill"]["run_id"])
    assert run["status"] == "completed_with_errors" and run["failed"] == 1, run  # F cannot compute
    assert _record(ws, t["id"], rid) == {"F": None, "G": None}
    fresh = ws.api.post(url, json={"fields": {}}).json()
    assert fresh["fields"] == {"F": None, "G": None} and "F" in fresh["pipeline"]["errors"]
