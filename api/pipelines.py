"""Running a table's computed columns after a write (DESIGN §5).

The API starts the pipeline workflow for the written records (eager start on the
in-process worker when there is one) and waits for its result, so the write response
carries the computed values and ``pipeline: {status, run_id, errors}``. Tables without
computed columns to run (and ``run_pipeline=false``) skip it.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from activities.bulkplan import dependants_map
from activities.snap import caller_of, table_snap
from activities.types import PipelineInput, PipelineResult
from api.limits import charge_automation_runs
from api.state import AppState
from storage import records as rec
from storage.access import Principal
from storage.errors import PlanLimit
from storage.pipelines import plan_steps
from storage.plans import plan as plan_of
from storage.schema import ColumnMeta, TableMeta
from workflows.pipeline import PipelineWorkflow

CHUNK = 500  # records per workflow for batches
GRACE_S = 5.0
SA_WORKSPACE = SearchAttributeKey.for_int("WdsWorkspace")
SA_TABLE = SearchAttributeKey.for_int("WdsTable")
SA_MODE = SearchAttributeKey.for_keyword("WdsMode")
SA_RECORDS = SearchAttributeKey.for_keyword_list("WdsRecords")


def workflow_id(table: TableMeta, mode: str, record_ids: list[int]) -> str:
    first = record_ids[0] if record_ids else 0
    more = f"+{len(record_ids) - 1}" if len(record_ids) > 1 else ""
    return f"pipeline/ws{table.workspace_id}/t{table.id}/{mode}/r{first}{more}/{uuid.uuid4().hex[:10]}"


def pipeline_input(
    principal: Principal, table: TableMeta, record_ids: list[int], mode: str, levels: list[list[ColumnMeta]]
) -> PipelineInput:
    p = plan_of(principal.plan)
    return PipelineInput(
        table=table_snap(table),
        record_ids=record_ids,
        mode=mode,
        levels=[[c.id for c in level] for level in levels],
        caller=caller_of(principal),
        time_budget_s=float(p.pipeline_seconds_per_row),
        step_budget=p.pipeline_steps_per_row,
        dependants=dependants_map(table),
    )


async def start_and_wait(state: AppState, client: Client, inp: PipelineInput, table: TableMeta) -> PipelineResult:
    wid = workflow_id(table, inp.mode, inp.record_ids)
    handle = await client.start_workflow(
        PipelineWorkflow.run,
        inp,
        id=wid,
        task_queue=state.settings.task_queue,
        execution_timeout=timedelta(seconds=inp.time_budget_s + GRACE_S * 4),
        request_eager_start=state.worker is not None,
        memo={"workspace": table.workspace_id, "table": table.id, "mode": inp.mode,
              "records": inp.record_ids[:100]},
        search_attributes=TypedSearchAttributes([
            SearchAttributePair(SA_WORKSPACE, table.workspace_id),
            SearchAttributePair(SA_TABLE, table.id),
            SearchAttributePair(SA_MODE, inp.mode),
            SearchAttributePair(SA_RECORDS, [str(r) for r in inp.record_ids[:100]]),
        ]) if state.settings.temporal_search_attributes else None,
    )
    return await asyncio.wait_for(handle.result(), timeout=inp.time_budget_s + GRACE_S)


def outcome_of(result: PipelineResult, record_id: int) -> dict[str, Any]:
    o = result.records.get(str(record_id))
    if o is None:
        return {"status": "error", "run_id": result.run_id, "errors": {"_record": "record vanished during the run"}}
    return {"status": o.status, "run_id": result.run_id, "errors": o.errors}


async def run_after_write(
    state: AppState,
    principal: Principal,
    table: TableMeta,
    rows: list[dict[str, Any]],
    *,
    mode: str,
    changed: list[str] | None,
    enabled: bool = True,
    only: list[int] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Run the pipeline over freshly written rows; returns the final rows and the outcome.

    For one row the outcome is ``{status, run_id, errors}``; for several it adds
    ``per_record`` (record id → outcome) and ``status`` is ``error`` if any row failed.
    """
    if not enabled or not rows:
        return rows, None
    levels = plan_steps(table, mode=mode, changed=changed or (), only=only)
    if not levels:
        return rows, None
    client = state.temporal
    ids = [r["id"] for r in rows]
    if client is None:
        outcome = {"status": "unavailable", "run_id": None,
                   "errors": {"_pipeline": "the pipeline engine (Temporal) is not reachable"}}
        return rows, outcome if len(rows) == 1 else {**outcome, "per_record": {}}
    try:  # one automation run per record (monthly quota); the write itself has happened
        await charge_automation_runs(state, principal, len(ids))
    except PlanLimit as exc:
        outcome = {"status": "error", "run_id": None, "errors": {"_pipeline": exc.message},
                   "code": exc.code, "upgrade": True}
        return rows, outcome if len(rows) == 1 else {**outcome, "per_record": {}}
    results: list[PipelineResult] = []
    chunks = [ids[i:i + CHUNK] for i in range(0, len(ids), CHUNK)]
    try:
        results = list(await asyncio.gather(*(
            start_and_wait(state, client, pipeline_input(principal, table, chunk, mode, levels), table)
            for chunk in chunks
        )))
    except asyncio.TimeoutError:
        outcome = {"status": "error", "run_id": None, "errors": {"_pipeline": "budget_exceeded"}}
        return rows, outcome if len(rows) == 1 else {**outcome, "per_record": {}}
    async with state.db.connection() as conn:
        final = await rec.get_record_rows(conn, table=table, record_ids=ids)
    by_chunk = {rid: res for res in results for rid in res.records}
    if len(rows) == 1:
        return final, outcome_of(results[0], ids[0])
    per = {str(i): outcome_of(by_chunk[str(i)], i) for i in ids if str(i) in by_chunk}
    status = "error" if any(o["status"] == "error" for o in per.values()) else "ok"
    return final, {"status": status, "run_id": results[0].run_id if len(results) == 1 else None,
                   "run_ids": [r.run_id for r in results], "errors": {}, "per_record": per}
