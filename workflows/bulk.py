"""Bulk runs (run-actions, schedules): a table's pipeline over many records, in chunks.

Never one workflow per record: each chunk of records is one PipelineWorkflow child run,
a bounded number at a time; progress is written after each chunk so ``GET /runs/{id}``
can report it. Records are paged by id, so a run over a filter sees a stable set.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.types import BulkInput, PageInput, PipelineInput, PipelineResult, ProgressInput

    from workflows.pipeline import PipelineWorkflow

LOCAL = timedelta(seconds=60)
RETRY = RetryPolicy(maximum_attempts=5, initial_interval=timedelta(milliseconds=200))


@workflow.defn(name="BulkRunWorkflow")
class BulkRunWorkflow:
    @workflow.run
    async def run(self, inp: BulkInput) -> dict[str, int]:
        done = failed = 0
        sem = asyncio.Semaphore(max(1, inp.concurrency))
        lock = asyncio.Lock()
        tasks = []
        index = 0

        async def one(ids: list[int], n: int) -> None:
            nonlocal done, failed
            async with sem:
                child = PipelineInput(
                    table=inp.table, record_ids=ids, mode=inp.mode, levels=inp.levels, caller=inp.caller,
                    time_budget_s=inp.time_budget_s, step_budget=inp.step_budget,
                    dependants=inp.dependants,
                )
                try:
                    res: PipelineResult = await workflow.execute_child_workflow(
                        PipelineWorkflow.run, child, id=f"{inp.run_id}/chunk-{n}",
                        execution_timeout=timedelta(seconds=inp.time_budget_s * 2 + 60),
                    )
                    bad = sum(1 for o in res.records.values() if o.status == "error")
                    ok = len(res.ok)
                except Exception:
                    bad, ok = len(ids), 0
                async with lock:
                    done += ok
                    failed += bad
                    await workflow.execute_local_activity(
                        "run_progress", ProgressInput(run_id=inp.run_id, done=done, failed=failed),
                        start_to_close_timeout=LOCAL, retry_policy=RETRY,
                    )

        if inp.record_ids is not None:
            for i in range(0, len(inp.record_ids), inp.chunk):
                tasks.append(asyncio.create_task(one(inp.record_ids[i:i + inp.chunk], index)))
                index += 1
        else:
            after = 0
            while True:
                ids: list[int] = await workflow.execute_local_activity(
                    "page_ids", PageInput(table=inp.table, filters=inp.filters, after_id=after, limit=inp.chunk),
                    start_to_close_timeout=LOCAL, retry_policy=RETRY, result_type=list,
                )
                if not ids:
                    break
                tasks.append(asyncio.create_task(one(ids, index)))
                index += 1
                after = ids[-1]
                if len(ids) < inp.chunk:
                    break
        await asyncio.gather(*tasks)
        await workflow.execute_local_activity(
            "run_progress",
            ProgressInput(run_id=inp.run_id, done=done, failed=failed, status="completed"),
            start_to_close_timeout=LOCAL, retry_policy=RETRY,
        )
        return {"done": done, "failed": failed}
