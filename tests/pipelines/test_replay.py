"""Our workflows run unsandboxed for speed (docs/decisions.md); this keeps the sandbox's
guarantees: real histories of every workflow path are replayed under Temporal's default
sandbox, which fails on restricted calls (I/O, wall clock, randomness) and on any
non-determinism between the recorded run and the code."""

from __future__ import annotations

import asyncio
import time

from temporalio.client import Client
from temporalio.worker import Replayer

from workflows.bulk import BulkRunWorkflow
from workflows.pipeline import PipelineWorkflow
from workflows.scheduled import ScheduledRunWorkflow


def test_recorded_histories_replay_under_the_default_sandbox(ws, services):
    log = ws.create_table("Log", [{"name": "Msg", "type": "text"}, {"name": "Len", "type": "formula", "formula": "LEN({Msg})"}])
    t = ws.create_table("Replay", [
        {"name": "A", "type": "number"},
        {"name": "Json", "type": "text"},
        {"name": "B", "type": "formula", "formula": "{A} * 2"},  # pure
        {"name": "Items", "type": "json_parser", "config": {"source_column": "Json", "path": "items"}},
        {"name": "Each", "type": "loop", "config": {"source_column": "Items", "step": {"type": "formula", "config": {"formula": "{item} + 1"}}}},
        {"name": "Wait", "type": "delay", "config": {"seconds": 0}},
        {"name": "Logged", "type": "create_record", "config": {"table_id": log["id"], "fields": {"Msg": "a{{ A }}"}}},
    ])
    pure = ws.create_table("Pure", [{"name": "A", "type": "number"}, {"name": "B", "type": "formula", "formula": "{A} + 1"}])
    run_ids = [ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1, "Json": '{"items": [1, 2]}'}}).json()["pipeline"]["run_id"],
               ws.api.post(f"/tables/{pure['id']}/records", json={"fields": {"A": 1}}).json()["pipeline"]["run_id"]]
    bulk = ws.api.post(f"/tables/{pure['id']}/run-actions", json={"filters": {"A": "gte.0"}}).json()
    deadline = time.monotonic() + 60
    while ws.api.get(f"/runs/{bulk['run_id']}").json()["status"] != "completed" and time.monotonic() < deadline:
        time.sleep(0.2)
    run_ids.append(bulk["workflow_id"])

    async def replay() -> int:
        client = await Client.connect(services.temporal.address)
        histories = []
        for wid in run_ids:
            histories.append(await client.get_workflow_handle(wid).fetch_history())
            # children (record steps' own pipelines, bulk chunks) too
            async for wf in client.list_workflows(f'WorkflowId STARTS_WITH "{wid}/"'):
                histories.append(await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history())
        replayer = Replayer(workflows=[PipelineWorkflow, BulkRunWorkflow, ScheduledRunWorkflow])  # default sandbox
        for history in histories:
            await replayer.replay_workflow(history)
        return len(histories)

    assert asyncio.run(replay()) >= 4
