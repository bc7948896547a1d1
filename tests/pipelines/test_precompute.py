"""Staged creates (api/services/pipelines.py ``create_computed``): a batch create whose computed
columns are all formulas/parsers has them computed by its run before its one INSERT.

Checked against an API process on the same database with ``WDS_PIPELINE_PRECOMPUTE=false``
(insert, then run and update): the same answers, the same stored records, the same
outcomes; and what only the staged path does — one realtime INSERT per record, already
complete, and no second write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from activities import written
from tests.conftest import api_process

COLUMNS = [
    {"name": "A", "type": "number"},
    {"name": "Json", "type": "text"},
    {"name": "When", "type": "date"},
    {"name": "Pick", "type": "single_select", "options": ["red", "blue"]},
    {"name": "Double", "type": "formula", "formula": "{A} * 2"},
    {"name": "Inv", "type": "formula", "formula": "1 / {A}"},
    {"name": "After", "type": "formula", "formula": "{Inv} + 1"},
    {"name": "Label", "type": "formula", "formula": "{Pick} & \"-\" & DATETIME_FORMAT({When}, 'YYYY-MM-DD')"},
    {"name": "Parsed", "type": "json_parser", "config": {"source_column": "Json", "path": "a.b"}},
]


def rows_for(n: int) -> list[dict[str, Any]]:
    return [{"fields": {"A": i, "Json": f'{{"a": {{"b": [{i}, "x"]}}, "z": null}}', "When": f"2026-03-{1 + i % 28:02d}",
                        "Pick": "red" if i % 2 else "blue"}} for i in range(n)]


@pytest.fixture(scope="module")
def insert_first_url(services: Any) -> Iterator[str]:
    """An API process on the same database that inserts first and runs after."""
    with api_process(services, name="api-insert-first", WDS_PIPELINE_PRECOMPUTE="false") as url:
        yield url


def _normal(result: dict[str, Any]) -> dict[str, Any]:
    """A batch result without what differs between two writes (ids, times, run ids)."""
    if "record" not in result:
        return result
    rec = result["record"]
    pipeline = rec.get("pipeline") or {}
    return {"fields": rec["fields"], "status": pipeline.get("status"), "errors": pipeline.get("errors")}


def test_staged_and_insert_first_batches_answer_alike(ws, insert_first_url):
    other = ws.create_table("Other", [{"name": "N", "type": "text"}])
    linked = ws.api.post(f"/tables/{other['id']}/records", json={"fields": {"N": "x"}}).json()["id"]
    t = ws.create_table("Staged", [*COLUMNS, {"name": "Link", "type": "relation", "relation_table_id": other["id"]}])
    rows = rows_for(40)
    rows[3]["fields"]["Link"] = linked
    rows[7]["fields"]["Link"] = 987654  # a missing record: this row alone fails
    rows.append({"fields": {"A": "not a number"}})  # refused before anything runs
    staged = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows})
    with ws.client(ws.builder_token) as c:
        c.base_url = f"{insert_first_url}/functions/v1/rest-api"
        first = c.post(f"/tables/{t['id']}/records/batch", json={"rows": rows})
    assert staged.status_code == first.status_code == 200, (staged.text, first.text)
    a, b = staged.json(), first.json()
    assert [_normal(r) for r in a["results"]] == [_normal(r) for r in b["results"]]
    assert a["results"][7]["code"] == "INVALID_VALUE" and a["results"][40]["code"] == "INVALID_VALUE"
    assert a["pipeline"]["status"] == b["pipeline"]["status"] == "error"  # 1 / 0 in row 0
    assert len(a["pipeline"]["run_ids"]) == 1 and a["pipeline"]["run_id"] == a["pipeline"]["run_ids"][0]
    zero = a["results"][0]["record"]
    assert zero["fields"]["Inv"] is None and set(zero["pipeline"]["errors"]) == {"Inv", "After"}
    two = a["results"][2]["record"]
    blue = next(o["id"] for c in t["columns"] if c["name"] == "Pick" for o in c["options"] if o["label"] == "blue")
    assert two["fields"] == {"A": 2, "Json": rows[2]["fields"]["Json"], "When": "2026-03-03T00:00:00+00:00",
                             "Pick": blue, "Double": 4, "Inv": 0.5, "After": 1.5, "Label": "blue-2026-03-03",
                             "Parsed": [2, "x"], "Link": None}
    assert a["results"][3]["record"]["fields"]["Link"] == linked
    # what the answer says is what is stored, and what a read returns (pipeline included)
    for res in a["results"]:
        if "record" in res:
            got = ws.api.get(f"/tables/{t['id']}/records/{res['record']['id']}").json()
            assert got == res["record"]
    ids = [r["record"]["id"] for r in a["results"] if "record" in r]
    assert ids == sorted(ids)  # ids ascend with the input, as an INSERT gives them


def test_a_staged_batch_writes_each_record_once_with_its_values(ws, services):
    """One realtime INSERT event per record, already complete; no UPDATE follows."""
    t = ws.create_table("Once", COLUMNS)
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows_for(25)})
    assert r.status_code == 200 and r.json()["pipeline"]["status"] == "error", r.text
    ids = [x["record"]["id"] for x in r.json()["results"]]
    with psycopg.connect(services.pg.dsn) as conn:
        events = conn.execute(
            "SELECT event, record FROM wds.events WHERE workspace_id = %s AND table_id = %s ORDER BY seq",
            (ws.id, t["id"])).fetchall()
        stored = conn.execute(f"SELECT count(*), count(_pipeline) FROM ws_{ws.id}.t_{t['id']}").fetchone()
    assert [e for e, _ in events] == ["INSERT"] * 25
    assert [rec["id"] for _, rec in events] == ids
    double = next(f"c_{c['id']}" for c in t["columns"] if c["name"] == "Double")
    assert events[5][1][double] == 10 and "_pipeline" not in events[5][1]  # stored rows, as captured
    assert stored == (25, 25)


def test_a_staged_batch_counts_its_automation_runs_once(ws, services):
    from tests.limits.conftest import counter, wait_for

    t = ws.create_table("Runs", COLUMNS[:5])
    with psycopg.connect(services.pg.dsn, autocommit=True) as db:
        before = counter(db, ws.id, "automation_runs")
        r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows_for(12)})
        assert r.status_code == 200 and r.json()["pipeline"]["status"] == "ok", r.text
        assert wait_for(lambda: counter(db, ws.id, "automation_runs") == before + 12)
        r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows_for(3)})
        assert wait_for(lambda: counter(db, ws.id, "automation_runs") == before + 15)
        assert counter(db, ws.id, "automation_runs") == before + 15


async def test_staged_rows_go_to_one_run_attempt_only():
    """activities/written.py: the staged rows are taken once (a retried attempt finds none
    and writes nothing); the write settles what it stored; giving up settles nothing."""
    staged = written.stage("run-s")
    try:
        assert written.take_staged("run-s") is staged
        assert written.take_staged("run-s") is None  # a retry: not staged any more
        staged.fill([{"id": 1}])
        staged.fill(None)  # too late: filled once
        assert await staged.rows == [{"id": 1}]
        staged.hand({"r": 1}, [{"id": 1}])
        assert await asyncio.wait_for(staged.computed, 1) == ({"r": 1}, [{"id": 1}])
        staged.settle({1})
        staged.settle(set())
        assert staged.stored.result() == {1}
    finally:
        written.unstage("run-s")
    gave_up = written.stage("run-t")
    written.unstage("run-t")  # the write gave up before the run came
    assert gave_up.stored.result() == set() and gave_up.rows.cancelled()
    assert written.take_staged("run-t") is None
