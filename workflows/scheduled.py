"""A schedule firing: prepare a bulk run (its own ``wds.runs`` row), then run it.

Temporal Schedules start this workflow (id ``scheduled/ws<ws>/t<table>/<sid>-<time>``);
the bulk work is a child ``BulkRunWorkflow`` so an operator sees both in the UI.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.types import Prepared, PrepareInput, ScheduledRunInput

PREPARE_TIMEOUT = timedelta(seconds=60)
PREPARE_RETRY = RetryPolicy(maximum_attempts=5, initial_interval=timedelta(milliseconds=200))


@workflow.defn(name="ScheduledRunWorkflow")
class ScheduledRunWorkflow:
    @workflow.run
    async def run(self, inp: ScheduledRunInput) -> dict[str, Any]:
        wid = workflow.info().workflow_id
        prepared: Prepared = await workflow.execute_local_activity(
            "prepare_scheduled_run", PrepareInput(run=inp, workflow_id=wid),
            start_to_close_timeout=PREPARE_TIMEOUT, retry_policy=PREPARE_RETRY, result_type=Prepared,
        )
        if prepared.bulk is None:
            workflow.logger.info("schedule %s skipped: %s", inp.schedule_id, prepared.skipped)
            return {"skipped": prepared.skipped}
        # by name: the input is the BulkInput as JSON, decoded by the child itself
        counts: dict[str, int] = await workflow.execute_child_workflow(
            "BulkRunWorkflow", prepared.bulk, id=f"{wid}/bulk", execution_timeout=timedelta(days=7),
            result_type=dict,
        )
        return {"run_id": prepared.bulk["run_id"], **counts}
