"""A bulk run continues as new every ``WDS_BULK_CHUNKS_PER_RUN`` chunks, so its history
stays bounded whatever the table's size.

Measured before: a backfill of an http/record-step column wrote ~12 history events and
~9 KB per 200-row chunk into one workflow history, so Temporal's 51,200-event limit ended
it near 870,000 rows (a 20,000-row fetch_records backfill: 1,180 events, 917 KB; a
1,000,000-row formula backfill: 3,032 events, 17 MB). Here an API plans runs of one chunk
each, so a few hundred rows take several runs: counts, failed-row lists and retries must
carry across them, and every run's history must replay.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.worker import Replayer

from tests.conftest import ApiProcess, Services, running_api
from tests.pipelines.test_backfill import fill, flaky, values, wait_run  # noqa: F401 (fixture)
from workflows.bulk import BulkRunWorkflow
from workflows.pipeline import PipelineWorkflow


@pytest.fixture(scope="module")
def continuing_api(services: Services) -> Iterator[ApiProcess]:
    yield from running_api(services, name="api-bulk-continue", WDS_BULK_CHUNKS_PER_RUN="1")


def via(ws: Any, api: ApiProcess) -> Any:
    """``ws`` as seen through another API process (its ``.api`` client)."""
    client = httpx.Client(base_url=f"{api.base_url}/functions/v1/rest-api",
                          headers={"Authorization": f"Bearer {ws.builder_token}"}, timeout=60)
    ws.clients.append(client)
    return SimpleNamespace(api=client)


def runs_of(services: Services, workflow_id: str) -> list[str]:
    """The statuses of every run of ``workflow_id`` (oldest first), after replaying each
    run's history on today's code."""
    async def go() -> list[str]:
        client = await Client.connect(services.temporal.address)
        found = []
        async for wf in client.list_workflows(f'WorkflowId = "{workflow_id}"'):
            found.append((wf.start_time, wf.run_id, wf.status.name if wf.status else "?"))
        replayer = Replayer(workflows=[BulkRunWorkflow, PipelineWorkflow])
        for _, run_id, _ in found:
            await replayer.replay_workflow(await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history())
        return [status for _, _, status in sorted(found)]
    return asyncio.run(go())


def test_a_backfill_continues_as_new_and_computes_every_row(ws, continuing_api, services):
    """Formula chunks are 1,000 rows: 2,500 rows are three runs of one chunk."""
    other = via(ws, continuing_api)
    t = ws.create_table("Cont", [{"name": "A", "type": "number"}])
    fill(ws, t["id"], 2500)
    r = other.api.post(f"/tables/{t['id']}/columns", json={"name": "Twice", "type": "formula", "formula": "{A} * 2"})
    assert r.status_code == 201, r.text
    run = wait_run(other, r.json()["backfill"]["run_id"], timeout=120)
    assert run["status"] == "completed" and run["done"] == 2500 and run["failed"] == 0, run
    assert values(ws, t["id"], "Twice") == {i: i * 2 for i in range(2500)}
    assert runs_of(services, run["workflow_id"]) == ["CONTINUED_AS_NEW", "CONTINUED_AS_NEW", "COMPLETED"]


def test_failures_and_retries_carry_across_runs(ws, continuing_api, services, flaky):  # noqa: F811
    """http chunks are 200 rows: 450 rows are three runs. Odd rows always fail, and every
    row fails its first call (``/once/`` then ``/fail/``): the retry pass of each run's rows
    happens before it continues, so no list of ids rides into the next run."""
    other = via(ws, continuing_api)
    t = ws.create_table("ContFail", [{"name": "A", "type": "number"}])
    fill(ws, t["id"], 450)
    r = other.api.post(f"/tables/{t['id']}/columns", json={
        "name": "Got", "type": "http_request", "backfill": True,
        "config": {"method": "GET",
                   "url": flaky + "/{% if A % 2 == 1 %}fail{% else %}once{% endif %}/{{ A }}"}})
    assert r.status_code == 201, r.text
    run = wait_run(other, r.json()["backfill"]["run_id"], timeout=180)
    assert run["status"] == "completed_with_errors" and run["done"] == 225 and run["failed"] == 225, \
        {k: run[k] for k in ("status", "done", "failed")}
    assert len(run["failed_rows"]) == 100  # the first 100 listed, across runs; the count covers all
    got = values(ws, t["id"], "Got")
    assert {a: v for a, v in got.items() if a % 2 == 0} == {a: {"n": a} for a in range(0, 450, 2)}
    assert all(got[a] is None for a in range(1, 450, 2))
    statuses = runs_of(services, run["workflow_id"])
    assert statuses[-1] == "COMPLETED" and statuses.count("CONTINUED_AS_NEW") == 2, statuses


def test_a_run_action_over_explicit_ids_continues_from_where_it_stopped(ws, continuing_api, services, flaky):  # noqa: F811
    """420 of 450 ids, in http chunks of 200: three runs, each going on from the offset
    the one before reached."""
    other = via(ws, continuing_api)
    t = ws.create_table("ContIds", [{"name": "A", "type": "number"}])
    fill(ws, t["id"], 450)
    c = other.api.post(f"/tables/{t['id']}/columns", json={
        "name": "Got", "type": "http_request", "config": {"method": "GET", "url": flaky + "/ok/{{ A }}"}})
    assert c.status_code == 201 and c.json()["backfill"] is None, c.text
    ids = [x["id"] for x in ws.api.get(f"/tables/{t['id']}/records?order=A.asc&limit=1000").json()["records"]]
    r = other.api.post(f"/tables/{t['id']}/run-actions", json={"column_ids": [c.json()["id"]], "record_ids": ids[:420]})
    assert r.status_code == 202, r.text
    run = wait_run(other, r.json()["run_id"], timeout=180)
    assert run["status"] == "completed" and run["done"] == 420 and run["failed"] == 0, run
    assert values(ws, t["id"], "Got") == {a: ({"n": a} if a < 420 else None) for a in range(450)}
    assert runs_of(services, run["workflow_id"]) == ["CONTINUED_AS_NEW", "CONTINUED_AS_NEW", "COMPLETED"]


def test_a_run_whose_workflow_temporal_ended_reads_failed_not_running_for_ever(ws, services):
    """A million-row backfill's workflow, terminated by Temporal in its first 8 s
    (``GrpcMessageTooLarge``), left its run reading "running, 0 done" for ever. A run whose
    workflow has ended without reporting now reads ``failed``, the rows it did not do
    counted, with the reason."""
    t = ws.create_table("Ended", [{"name": "A", "type": "number"},
                                  {"name": "Wait", "type": "delay", "config": {"seconds": 120}}])
    fill(ws, t["id"], 5)
    wait_col = next(c["id"] for c in t["columns"] if c["name"] == "Wait")
    r = ws.api.post(f"/tables/{t['id']}/run-actions", json={"column_ids": [wait_col]})
    assert r.status_code == 202, r.text
    started = r.json()
    assert ws.api.get(f"/runs/{started['run_id']}").json()["status"] == "running"

    async def terminate() -> None:
        client = await Client.connect(services.temporal.address)
        await client.get_workflow_handle(started["workflow_id"]).terminate(reason="stopped by the test")
    asyncio.run(terminate())
    run = ws.api.get(f"/runs/{started['run_id']}").json()
    assert run["status"] == "failed" and run["done"] == 0 and run["failed"] == 5, run
    assert "terminated" in run["reason"], run
    assert ws.api.get(f"/runs/{started['run_id']}").json() == run  # stored: the next read agrees
