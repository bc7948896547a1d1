"""What a pipeline run carries through its Temporal history is bounded (docs/decisions.md
"A run's history is bounded by bytes").

Every load of a run's records, every HTTP/action/AI step's input and every step's result
is recorded in the run's workflow history. Temporal refuses a workflow task whose upload
passes 4 MiB (one gRPC request) and a history past 50 MiB, and terminates the workflow:
a backfill of 70 rows of 800 KB read by an http_request column failed every row with
``Terminated`` (reason ``GrpcMessageTooLarge``: 70 loads in one workflow task), and a
batch of 12 such rows before six http_request columns answered ``running`` at once and
never filled a value. Runs are now planned by bytes and bounded as they run; and the
values of formula steps inside a mixed pipeline are capped as remote steps' are.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from temporalio.client import Client

from tests.pipelines.test_backfill import wait_run
from tests.pipelines.test_large_inputs import BIG, backfill_len_calls, batch, completed, receiver  # noqa: F401 (fixture)

MIB = 1024 * 1024


def histories(services: Any, prefix: str) -> list[tuple[str, str, int]]:
    """(workflow id, status, history bytes) of every workflow whose id starts with ``prefix``."""
    async def go() -> list[tuple[str, str, int]]:
        client = await Client.connect(services.temporal.address)
        out = []
        async for wf in client.list_workflows(f'WorkflowId STARTS_WITH "{prefix}"'):
            d = await client.get_workflow_handle(wf.id, run_id=wf.run_id).describe()
            out.append((wf.id, d.status.name if d.status else "?", d.raw_description.workflow_execution_info.history_size_bytes))
        return out
    return asyncio.run(go())


def test_a_backfill_of_many_large_rows_runs_in_chunks_bounded_by_bytes(ws, receiver, services):  # noqa: F811
    t, run_id = backfill_len_calls(ws, [{"N": i, "Long": "x" * BIG} for i in range(40)], receiver)
    run = wait_run(ws, run_id, timeout=180)
    # it was completed_with_errors, failed 40: every row "Terminated" (GrpcMessageTooLarge)
    assert run["status"] == "completed" and run["done"] == 40 and run["failed"] == 0, {k: run[k] for k in ("status", "done", "failed")}
    got = ws.api.get(f"/tables/{t['id']}/records?order=N.asc&select=N,Call&limit=100").json()["records"]
    assert [x["fields"]["Call"] for x in got] == [{"long": BIG}] * 40
    chunks = histories(services, run_id + "/")
    assert len(chunks) >= 8 and all(status == "COMPLETED" for _, status, _ in chunks), chunks
    assert max(size for _, _, size in chunks) < 10 * MIB, chunks  # 8 MiB of planned reads, and the results


def test_a_batch_whose_steps_read_large_fields_runs_in_runs_that_fit(ws, receiver, services):  # noqa: F811
    cols = [{"name": "N", "type": "number"}, {"name": "Long", "type": "text"}]
    cols += [{"name": f"Call{i}", "type": "http_request",
              "config": {"method": "POST", "url": receiver + f"/len{i}", "body": {"long": "{{ Long }}"}}} for i in range(6)]
    t = ws.create_table("Big", cols)
    out, took = batch(ws, t, [{"N": i, "Long": "x" * BIG} for i in range(12)])
    # it answered "running" at once, its one workflow terminated, no value ever stored
    assert out["pipeline"]["status"] == "ok", {k: v for k, v in out["pipeline"].items() if k != "per_record"}
    assert all(x["record"]["fields"][f"Call{i}"] == {"long": BIG} for x in out["results"] for i in range(6))
    assert took < 60
    runs = out["pipeline"]["run_ids"]
    assert len(runs) > 1
    for wid in runs:
        assert completed(services, wid) == "COMPLETED"  # the answer may come before the workflow ends
        (found,) = histories(services, wid)
        assert found[1] == "COMPLETED" and found[2] < 10 * MIB, found


def test_a_row_whose_steps_pass_the_run_budget_fails_the_steps_that_do_not_fit(ws, receiver, services):  # noqa: F811
    # 900 KB read by 40 http steps: 36 MB of step inputs for one row (at one level, their
    # inputs would all be uploaded in one workflow task)
    cols = [{"name": "N", "type": "number"}, {"name": "Long", "type": "text"}]
    cols += [{"name": f"Call{i:02}", "type": "http_request",
              "config": {"method": "POST", "url": receiver + f"/len{i}", "body": {"long": "{{ Long }}"}}} for i in range(40)]
    t = ws.create_table("Wide", cols)
    long = "x" * 900_000
    started = time.monotonic()
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"N": 1, "Long": long}}, timeout=120)
    assert r.status_code == 201, r.text[:500]
    assert time.monotonic() - started < 60
    rec = r.json()
    # it answered "running" and the workflow was terminated (GrpcMessageTooLarge)
    assert rec["pipeline"]["status"] == "error", rec["pipeline"]
    errors = rec["pipeline"]["errors"]
    ran = [n for n in (f"Call{i:02}" for i in range(40)) if rec["fields"][n] == {"long": 900_000}]
    assert 30 <= len(ran) < 40 and set(errors) == {f"Call{i:02}" for i in range(40)} - set(ran), errors
    assert all(e.startswith("not run: this run already carries") and "at most 32 MiB" in e for e in errors.values()), errors
    assert completed(services, rec["pipeline"]["run_id"]) == "COMPLETED"
    (found,) = histories(services, rec["pipeline"]["run_id"])
    assert found[1] == "COMPLETED" and found[2] < 33 * MIB, found  # within its 32 MiB budget (and the events)


def test_a_row_that_cannot_fit_a_run_alone_fails_and_a_bulk_run_counts_it(ws, receiver, services):  # noqa: F811
    # a loop of 64 http calls each reading 900 KB: 58 MB for one column of one row, also
    # when the retry pass runs that column alone (past Temporal's own 50 MiB)
    t = ws.create_table("Loop", [
        {"name": "Long", "type": "text"}, {"name": "Json", "type": "text"},
        {"name": "Items", "type": "json_parser", "config": {"source_column": "Json", "path": "items"}},
        {"name": "Each", "type": "loop", "config": {"source_column": "Items", "step": {
            "type": "http_request", "config": {"method": "POST", "url": receiver + "/len", "body": {"long": "{{ Long }}"}}}}},
        {"name": "Small", "type": "http_request", "config": {"method": "GET", "url": receiver + "/n/{{ item }}"}},
    ])
    rows = [{"Long": "x" * 900_000, "Json": '{"items": %s}' % list(range(64))}, {"Long": "y", "Json": '{"items": [1, 2]}'}]
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows, "run_pipeline": False})
    assert r.status_code == 200, r.text[:300]
    big, small = (x["record"]["id"] for x in r.json()["results"])
    r = ws.api.post(f"/tables/{t['id']}/run-actions", json={"record_ids": [big, small]})
    assert r.status_code in (200, 201, 202), r.text
    run = wait_run(ws, r.json()["run_id"], timeout=240)
    # its chunk's workflow was terminated at 50 MiB: both rows failed with "Terminated"
    assert run["status"] == "completed_with_errors" and run["done"] == 1 and run["failed"] == 1, run
    (row,) = run["failed_rows"]
    assert row["id"] == big and set(row["errors"]) == {"Each"}, row
    assert row["errors"]["Each"].startswith("item ") and ": not run: this run already carries" in row["errors"]["Each"]
    got = ws.api.get(f"/tables/{t['id']}/records/{small}").json()
    assert got["fields"]["Each"] == [{"long": 1}, {"long": 1}]
    for wid, status, size in histories(services, r.json()["run_id"] + "/"):
        assert status == "COMPLETED" and size < 33 * MIB, (wid, status, size)


def test_formula_values_in_a_mixed_pipeline_are_capped_like_responses(ws, receiver, services):  # noqa: F811
    # three values of 900 KB (row 2: 450,000 × "é", 2.7 MB as JSON) from one formula step:
    # the step's result (2.7 MB+) failed its workflow task with TMPRL1103 until the budget
    t = ws.create_table("Rept", [
        {"name": "N", "type": "number"},
        {"name": "Call", "type": "http_request", "config": {"method": "GET", "url": receiver + "/n/{{ N }}"}},
        {"name": "Big", "type": "formula", "formula": 'REPT(IF({N} = 2, "é", "ab"), 450000)'},
        {"name": "Len", "type": "formula", "formula": "LEN({Big})"},
    ])
    out, took = batch(ws, t, [{"N": 1}, {"N": 2}, {"N": 3}])
    assert took < 60, took
    first, second, third = (x["record"] for x in out["results"])
    per = {str(x["record"]["id"]): x["record"]["pipeline"] for x in out["results"]}
    assert first["fields"]["Len"] == 900_000 and per[str(first["id"])]["status"] == "ok"
    assert per[str(second["id"])]["errors"]["Big"] == "value larger than 1.5 MiB as JSON, the most a step keeps"
    assert per[str(third["id"])]["errors"]["Big"] == (
        "value of 879 KiB not kept: the values of one run of a step may total at most 1.5 MiB;"
        " run this record alone or in a smaller batch")
    assert second["fields"]["Big"] is None and third["fields"]["Len"] is None
    assert all(x["record"]["fields"]["Call"] == {"path": f"/n/{i + 1}"} for i, x in enumerate(out["results"]))
    assert completed(services, out["pipeline"]["run_ids"][0]) == "COMPLETED"
    # alone, the third fits
    r = ws.api.patch(f"/tables/{t['id']}/records/{third['id']}", json={"fields": {"N": 4}})
    assert r.status_code == 200, r.text[:300]
    assert r.json()["fields"]["Len"] == 900_000 and r.json()["pipeline"]["status"] == "ok"


def test_a_usual_mixed_run_adds_no_workflow_task(ws, receiver, services):  # noqa: F811
    # the bounds cost nothing when nothing is large: formulas side by side at one level
    # reserve a share of a task each, not its whole (no 1 ms timer)
    t = ws.create_table("Usual", [
        {"name": "N", "type": "number"},
        {"name": "Call", "type": "http_request", "config": {"method": "GET", "url": receiver + "/n/{{ N }}"}},
        *({"name": f"F{i}", "type": "formula", "formula": f"{{N}} * {i}"} for i in range(5)),
        {"name": "After", "type": "formula", "formula": "{F1} + 1"},
    ])
    out, _ = batch(ws, t, [{"N": i} for i in range(20)])
    assert out["pipeline"]["status"] == "ok", out["pipeline"]

    async def timers() -> int:
        client = await Client.connect(services.temporal.address)
        history = await client.get_workflow_handle(out["pipeline"]["run_ids"][0]).fetch_history()
        return sum(1 for e in history.events if e.HasField("timer_started_event_attributes"))

    assert asyncio.run(timers()) == 0
