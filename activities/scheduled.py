"""Schedule firings: the local activity that turns a firing into a bulk run.

A Temporal Schedule starts ``ScheduledRunWorkflow`` with a fixed input (table, filters,
columns, the creator's token). Each firing plans against the table *as it is now* (the
columns may have changed since the schedule was made) and re-checks the token that made
the schedule: revoked, expired, or without the update grant on the table any more, the
firing is skipped and touches nothing. Every firing creates its own ``wds.runs`` row — a
skipped one too (status ``skipped`` with the reason, shown in the schedule's recent runs) —
(so ``GET /runs/{id}`` reports it), charges its records to the monthly automation-run
quota (a firing past the quota is skipped) and hands a BulkInput to the bulk workflow.
The run id derives from the firing's workflow id, so a retried activity reuses the row.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

from temporalio import activity

from activities.bulkplan import build_bulk_input
from activities.snap import caller_of
from activities.types import Caller, Prepared, PrepareInput, ScheduledRunInput  # noqa: F401 (re-exported)
from storage import access, meta, quotas, refs, runs
from storage import records as rec
from storage import schedules as sched
from storage.access import Action, Principal
from storage.db import Database
from storage.errors import PlanLimit, ServiceError
from storage.plans import plan as plan_of
from storage.query import parse_filter_list, plan_filters


def run_id_for(workflow_id: str) -> str:
    """The run id of a firing (stable across activity retries).

    >>> run_id_for("scheduled/ws1/t2/3-2026") == run_id_for("scheduled/ws1/t2/3-2026")
    True
    """
    return "run-s" + hashlib.sha256(workflow_id.encode()).hexdigest()[:15]


class ScheduleSteps:
    def __init__(self, db: Database, *, chunks_per_run: int) -> None:
        self.db = db
        self.chunks_per_run = chunks_per_run  # WDS_BULK_CHUNKS_PER_RUN

    @activity.defn(name="prepare_scheduled_run")
    async def prepare_scheduled_run(self, inp: PrepareInput) -> Prepared:
        r = inp.run
        async with self.db.connection() as conn:
            row = await sched.get_schedule(conn, workspace_id=r.workspace_id, schedule_id=r.schedule_id)
            workspace = await meta.get_workspace(conn, workspace_id=r.workspace_id)
            schema = await meta.load_schema(conn, workspace_id=r.workspace_id)
            # the token as it is now (a rotation is followed to its successor), not the
            # grants captured when the schedule was made
            token_id = ((row or {}).get("spec") or {}).get("caller", {}).get("token_id", r.caller.token_id)
            creator = await access.principal_by_token_id(conn, token_id=token_id)
        table = schema.tables.get(r.table_id)
        if row is None or workspace is None or table is None:
            return Prepared(skipped="the schedule or its table no longer exists")
        run_id = run_id_for(inp.workflow_id)
        reason = _rights_problem(creator, r.workspace_id, table.id, table.name)
        if reason:
            return await self._skip(inp, table.id, run_id, reason)
        assert creator is not None
        column_ids = r.column_ids
        if column_ids:
            column_ids = [c for c in column_ids if (col := table.column_by_id(c)) is not None and col.computed]
            if not column_ids:
                return await self._skip(inp, table.id, run_id, "none of the scheduled columns exists any more")
        # the stored filters name columns by id: read them with today's names (a rename carries)
        filters = refs.decode_filter_list(
            (row["spec"] or {}).get("filters") or [],
            lambda i: c.name if (c := table.column_by_id(i)) is not None else None,
        )
        try:
            planned = plan_filters(parse_filter_list(filters), table) if filters else ()
        except ServiceError as exc:
            return await self._skip(inp, table.id, run_id, f"the schedule's filters no longer apply: {exc.message}")
        bulk = build_bulk_input(table, caller_of(creator), workspace["plan"], run_id=run_id, record_ids=None,
                                filters=filters, column_ids=column_ids, chunks_per_run=self.chunks_per_run)
        async with self.db.transaction() as conn:
            if await runs.get_run(conn, workspace_id=r.workspace_id, run_id=run_id) is None:
                total = await rec.count_matching(conn, table=table, filters=planned)
                try:
                    await _charge_runs(conn, workspace_id=r.workspace_id, plan_name=workspace["plan"],
                                       auto_recharge=bool(workspace.get("auto_recharge")), runs=total)
                except PlanLimit as exc:
                    reason = f"{exc.code}: {exc.message}"
                    await runs.record_skipped(conn, run_id=run_id, workspace_id=r.workspace_id, table_id=table.id,
                                              workflow_id=inp.workflow_id, reason=reason)
                    return Prepared(skipped=reason)
                await runs.create_run(conn, run_id=run_id, workspace_id=r.workspace_id, table_id=table.id,
                                      total=total, workflow_id=inp.workflow_id, kind="schedule")
        return Prepared(bulk=asdict(bulk))

    async def _skip(self, inp: PrepareInput, table_id: int, run_id: str, reason: str) -> Prepared:
        async with self.db.connection() as conn:
            await runs.record_skipped(conn, run_id=run_id, workspace_id=inp.run.workspace_id, table_id=table_id,
                                      workflow_id=inp.workflow_id, reason=reason)
        return Prepared(skipped=reason)


def _rights_problem(creator: Principal | None, workspace_id: int, table_id: int, table_name: str) -> str:
    """Why the schedule's token may not run it now ("" when it may)."""
    if creator is None or creator.workspace_id != workspace_id:
        return "the token that made this schedule was revoked or has expired"
    if creator.read_only:
        return "this workspace's plan allows reads only"
    if not creator.can(table_id, Action.UPDATE):
        return f"the token that made this schedule no longer has update permission on table {table_name!r}"
    return ""


async def _charge_runs(conn: Any, *, workspace_id: int, plan_name: str, auto_recharge: bool, runs: int) -> None:
    """Charge a firing's records to the monthly automation-run quota, like run-actions does.

    Raises:
        PlanLimit: ``PLAN_LIMIT_AUTOMATION_RUNS`` — nothing is counted and the firing is skipped.
    """
    if runs <= 0:
        return
    month = quotas.month_key(datetime.now(timezone.utc))
    totals, _ = await quotas.load_counters(conn, pairs=[(workspace_id, month)])
    used = totals.get((workspace_id, month, quotas.AUTOMATION_RUNS), 0)
    excess = quotas.decide(plan_of(plan_name), quotas.AUTOMATION_RUNS, used=used, adding=runs,
                           auto_recharge=auto_recharge)
    deltas = {(workspace_id, month, quotas.AUTOMATION_RUNS): runs}
    if excess:
        deltas[(workspace_id, month, quotas.EXCESS)] = excess
    await quotas.add_counters(conn, deltas=deltas)
