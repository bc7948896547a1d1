"""Writes whose records change or vanish while their computed columns run.

A record deleted while its run ran used to answer 500 (``IndexError``) on create, run and
compute, and a batch's results shifted onto the wrong inputs: the answer was built from a
fresh read that left the deleted row out. The record keeps its place, as its write
committed it, with the outcome ``record vanished during the run``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

DELAY_S = 2


def _slow_table(ws: Any) -> dict[str, Any]:
    return ws.create_table("Slow", [
        {"name": "N", "type": "number"},
        {"name": "Wait", "type": "delay", "config": {"seconds": DELAY_S}},
        {"name": "F", "type": "formula", "formula": "{N} * 2"},
    ])


def _delete_soon(ws: Any, url: str, after_s: float = 0.6) -> threading.Thread:
    def go() -> None:
        time.sleep(after_s)
        with ws.client(ws.builder_token) as c:
            assert c.delete(url).status_code == 200

    thread = threading.Thread(target=go)
    thread.start()
    return thread


def _next_id(ws: Any, table_id: int) -> int:
    rows = ws.api.get(f"/tables/{table_id}/records", params={"order": "id.desc", "limit": "1"}).json()["records"]
    return (rows[0]["id"] if rows else 0) + 1


def test_a_create_whose_record_is_deleted_while_it_runs_answers_what_it_wrote(ws):
    t = _slow_table(ws)
    url = f"/tables/{t['id']}/records"
    rid = _next_id(ws, t["id"])
    deleter = _delete_soon(ws, f"{url}/{rid}")
    r = ws.api.post(url, json={"fields": {"N": 3}}, timeout=30)
    deleter.join()
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["id"] == rid and body["fields"]["N"] == 3
    assert body["pipeline"]["status"] == "error"
    assert body["pipeline"]["errors"] == {"_record": "record vanished during the run"}
    assert ws.api.get(f"{url}/{rid}").status_code == 404


def test_run_and_compute_of_a_record_deleted_while_it_runs(ws):
    t = _slow_table(ws)
    url = f"/tables/{t['id']}/records"
    for action, body in (("run", {"mode": "create"}), ("compute/Wait", None)):
        made = ws.api.post(url, json={"fields": {"N": 1}}, params={"run_pipeline": "false"}).json()
        deleter = _delete_soon(ws, f"{url}/{made['id']}")
        r = ws.api.post(f"{url}/{made['id']}/{action}", json=body, timeout=30)
        deleter.join()
        assert r.status_code == 200, (action, r.text)
        out = r.json()
        assert (out["record"]["id"] if action == "run" else out["record_id"]) == made["id"], action
        assert out["pipeline"]["errors"] == {"_record": "record vanished during the run"}, (action, out)


def test_a_batchs_results_stay_on_their_inputs_when_one_record_vanishes(ws):
    t = _slow_table(ws)
    url = f"/tables/{t['id']}/records"
    first = _next_id(ws, t["id"])
    deleter = _delete_soon(ws, f"{url}/{first}")
    r = ws.api.post(f"{url}/batch", json={"rows": [{"fields": {"N": n}} for n in (2, 0, 1)]}, timeout=30)
    deleter.join()
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["index"] for x in results] == [0, 1, 2]
    assert [x["record"]["fields"]["N"] for x in results] == [2, 0, 1]
    assert [x["record"]["id"] for x in results] == [first, first + 1, first + 2]
    assert results[0]["record"]["pipeline"]["errors"] == {"_record": "record vanished during the run"}
    for x in results[1:]:
        assert x["record"]["pipeline"]["status"] == "ok"
        assert x["record"]["fields"]["F"] == x["record"]["fields"]["N"] * 2
