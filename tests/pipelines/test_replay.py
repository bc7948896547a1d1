"""Our workflows run unsandboxed for speed (docs/decisions.md); this keeps the sandbox's
guarantees: real histories of every workflow path are replayed under Temporal's default
sandbox, which fails on restricted calls (I/O, wall clock, randomness) and on any
non-determinism between the recorded run and the code. Histories recorded by earlier
versions of the code (tests/pipelines/histories) must replay on today's: a change of
workflow logic either keeps their commands or is behind ``workflow.patched``."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import time
from pathlib import Path

from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from service.converter import DATA_CONVERTER
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
    over_limit = json.dumps({"items": list(range(1001))})  # the loop fails this row (workflow.patched)
    run_ids = [ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1, "Json": '{"items": [1, 2]}'}}).json()["pipeline"]["run_id"],
               ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 2, "Json": over_limit}}).json()["pipeline"]["run_id"],
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
        for replayer in _replayers(PipelineWorkflow, BulkRunWorkflow, ScheduledRunWorkflow):  # default sandbox
            for history in histories:
                await replayer.replay_workflow(history)
        return len(histories)

    assert asyncio.run(replay()) >= 5


HISTORIES = Path(__file__).parent / "histories"


def _replayers(*workflows: type) -> list[Replayer]:
    """Replayers under the default sandbox: with Temporal's default converter, and with
    the service's (service/converter.py), which must read every history the same."""
    return [Replayer(workflows=list(workflows)), Replayer(workflows=list(workflows), data_converter=DATA_CONVERTER)]


def test_a_loop_over_the_limit_recorded_before_it_failed_replays_as_it_ran():
    """Recorded before a list over the loop's limit failed the row: the run looped over its
    first 1,000 items (a batch of two rows: 1,001 items and 3). Replayed on today's code it
    must take the same path (``LOOP_LIMIT_FAILS`` is not patched in that history)."""
    raw = json.loads(gzip.decompress((HISTORIES / "loop_over_limit_before_error.json.gz").read_bytes()))
    history = WorkflowHistory.from_json("pipeline/recorded/loop-over-limit", raw)
    loops = [e for e in raw["events"] if e["eventType"] == "EVENT_TYPE_MARKER_RECORDED"]
    assert len(loops) == 1004  # load_records, json_parser, 1,000 loop iterations, the formula, write_results

    async def replay() -> None:
        for replayer in _replayers(PipelineWorkflow):
            await replayer.replay_workflow(history)

    asyncio.run(replay())


def test_a_run_whose_step_inputs_were_split_to_fit_replays_as_it_ran():
    """Recorded when the load and a step's input were first kept within one Temporal
    payload (``STEP_INPUTS_FIT``, tests/pipelines/test_large_inputs.py): a batch of three
    rows, 800,000 × "x", 400,000 × "é" (2.4 MB as JSON: its http step failed, naming the
    limit) and 800,000 × "y", before an http_request column reading that text. Two loads,
    the patch, the http step in two sub-batches of one record each, the formula, the
    write; replayed under the default sandbox."""
    raw = json.loads(gzip.decompress((HISTORIES / "step_inputs_fit.json.gz").read_bytes()))
    history = WorkflowHistory.from_json("pipeline/recorded/step-inputs-fit", raw)
    kinds = [(e["eventType"], (e.get("markerRecordedEventAttributes") or {}).get("markerName"))
             for e in raw["events"] if e["eventType"] in ("EVENT_TYPE_MARKER_RECORDED", "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED")]
    assert kinds.count(("EVENT_TYPE_ACTIVITY_TASK_SCHEDULED", None)) == 2
    assert kinds.count(("EVENT_TYPE_MARKER_RECORDED", "core_patch")) == 1
    assert kinds.count(("EVENT_TYPE_MARKER_RECORDED", "core_local_activity")) == 4

    async def replay() -> None:
        for replayer in _replayers(PipelineWorkflow):
            await replayer.replay_workflow(history)

    asyncio.run(replay())


def _kinds(raw: dict) -> list[tuple[str, str | None]]:
    return [(e["eventType"], (e.get("markerRecordedEventAttributes") or {}).get("markerName")) for e in raw["events"]]


def test_a_run_bounded_by_its_history_budget_replays_as_it_ran():
    """Recorded when a run's history was first bounded (``RUN_HISTORY_BOUNDED``,
    tests/pipelines/test_history_bounds.py): one record of 900 KB text before 40
    http_request columns reading it (at one level). The run waited for a new workflow
    task (1 ms timers) whenever the next inputs would take a task's upload past 3 MiB,
    scheduled 33 steps, and failed the last 7 without running them (its history would
    have passed 32 MiB); 29.6 MiB recorded. Replayed under the default sandbox."""
    raw = json.loads(gzip.decompress((HISTORIES / "run_history_bounded.json.gz").read_bytes()))
    history = WorkflowHistory.from_json("pipeline/recorded/run-history-bounded", raw)
    kinds = _kinds(raw)
    assert kinds.count(("EVENT_TYPE_MARKER_RECORDED", "core_patch")) == 1
    assert kinds.count(("EVENT_TYPE_ACTIVITY_TASK_SCHEDULED", None)) == 33
    assert kinds.count(("EVENT_TYPE_TIMER_STARTED", None)) == 4
    result = raw["events"][-1]["workflowExecutionCompletedEventAttributes"]["result"]["payloads"][0]["data"]
    errors = json.loads(base64.b64decode(result))["records"]["1"]["errors"]
    assert sorted(errors) == [f"Call{i}" for i in range(33, 40)]

    async def replay() -> None:
        for replayer in _replayers(PipelineWorkflow):
            await replayer.replay_workflow(history)

    asyncio.run(replay())


def test_a_bulk_run_chunked_by_bytes_replays_as_it_ran():
    """Recorded when a bulk run's chunks were first split by the bytes their runs carry
    (``bulk-chunks-by-bytes``): run-actions over 12 rows of 800 KB before an
    http_request column reading them: one page of ids, their costs (``record_costs``),
    and three pipeline children of 5, 5 and 2 rows. Replayed under the default sandbox."""
    raw = json.loads(gzip.decompress((HISTORIES / "bulk_chunks_by_bytes.json.gz").read_bytes()))
    history = WorkflowHistory.from_json("bulk/recorded/chunks-by-bytes", raw)
    kinds = _kinds(raw)
    assert kinds.count(("EVENT_TYPE_MARKER_RECORDED", "core_patch")) == 3
    assert kinds.count(("EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED", None)) == 3
    ids = [len(json.loads(base64.b64decode(
        e["startChildWorkflowExecutionInitiatedEventAttributes"]["input"]["payloads"][0]["data"]))["record_ids"])
        for e in raw["events"] if e["eventType"] == "EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED"]
    assert ids == [5, 5, 2]

    async def replay() -> None:
        for replayer in _replayers(BulkRunWorkflow, PipelineWorkflow):
            await replayer.replay_workflow(history)

    asyncio.run(replay())
