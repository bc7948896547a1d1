"""Running computed columns on demand, for every door: a record's pipeline, one cell, a
bulk run over ids or filters (run-actions, schedules, MCP), and a run's progress."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from activities.bulkplan import build_bulk_input
from activities.snap import caller_of
from api.deps import require_writable
from api.ops.access import table_for
from api.ops.records import record_id
from api.services.limits import charge_automation_runs
from api.services.pipelines import run_after_write
from api.state import AppState
from storage import records as rec
from storage import runs
from storage.access import Action, Principal
from storage.errors import NotFound, Unavailable, UnknownColumn, ValidationError
from storage.query import filter_items, parse_filter_list, parse_filter_object, plan_filters
from storage.schema import TableMeta
from storage.values import decode_value
from workflows.bulk import BulkRunWorkflow

MAX_IDS = 100_000


async def _row(state: AppState, principal: Principal, table_ref: int | str,
               ref: str | int) -> tuple[TableMeta, dict[str, Any]]:
    require_writable(principal)
    table = await table_for(state, principal, table_ref, Action.UPDATE)
    async with state.db.connection() as conn:
        row = await rec.get_record_row(conn, table=table, record_id=record_id(ref))
    if row is None:
        raise NotFound(f"record {ref} not found")
    return table, row


async def run_record(state: AppState, principal: Principal, table_ref: int | str, ref: str | int, *,
                     mode: str = "edit", changed_columns: list[str] | None = None) -> dict[str, Any]:
    """Re-run the record's pipeline as if ``changed_columns`` had changed (mode edit), or
    every computed column (mode create): ``{record, pipeline}``.

    Raises:
        UnknownColumn: a changed column the table lacks; NotFound: no such record.
    """
    changed = list(changed_columns or [])
    table, row = await _row(state, principal, table_ref, ref)
    unknown = [c for c in changed if table.column(c) is None]
    if unknown:
        raise UnknownColumn(f"unknown column(s): {', '.join(unknown)}")
    rows, outcome = await run_after_write(state, principal, table, [row], mode=mode, changed=changed)
    record = rec.row_to_record(table, rows[0])
    return {"record": record, "pipeline": outcome or {"status": "ok", "run_id": None, "errors": {}}}


async def compute_cell(state: AppState, principal: Principal, table_ref: int | str, ref: str | int,
                       column: str) -> dict[str, Any]:
    """Re-run exactly one computed column of one record (nothing else runs):
    ``{record_id, column, value, pipeline?}``.

    Raises:
        UnknownColumn: no such column; ValidationError: the column is not computed.
    """
    table, row = await _row(state, principal, table_ref, ref)
    col = table.column(column)
    if col is None and column.isascii() and column.isdigit():
        col = table.column_by_id(int(column))  # by id: any name, one with a "/" too
    if col is None:
        raise UnknownColumn(f"unknown column {column!r}")
    if not col.computed:
        raise ValidationError(f"column {column!r} is not computed")
    rows, outcome = await run_after_write(state, principal, table, [row], mode="edit", changed=None, only=[col.id])
    value = decode_value(col, rows[0].get(col.physical))
    out: dict[str, Any] = {"record_id": rows[0]["id"], "column": col.name, "value": value}
    if outcome is not None:
        out["pipeline"] = outcome
    return out


async def start_bulk(
    state: AppState, principal: Principal, table: TableMeta, *, record_ids: list[int] | None,
    filters: list[dict[str, Any]], column_ids: list[int] | None, kind: str = "run_actions",
) -> dict[str, Any]:
    """Start a bulk run over ids or filters (shared by run-actions, schedules and MCP)."""
    if state.temporal is None:
        raise Unavailable("the pipeline engine (Temporal) is not reachable; retry shortly")
    planned = plan_filters(parse_filter_list(filters), table) if filters else ()
    missing: list[int] | None = None
    async with state.db.connection() as conn:
        if record_ids is not None:
            ids = sorted(await rec.existing_ids(conn, table=table, ids=record_ids))
            total = len(ids)
            missing = sorted(set(record_ids) - set(ids))[:100]  # said in the answer, not silently skipped
        else:
            ids = None
            total = await rec.count_matching(conn, table=table, filters=planned)
    # the monthly automation-run quota is charged up front: a 402 comes before anything starts
    await charge_automation_runs(state, principal, total)
    run_id = f"run-{uuid.uuid4().hex[:16]}"
    wid = f"bulk/ws{table.workspace_id}/t{table.id}/{run_id}"
    async with state.db.connection() as conn:
        await runs.create_run(conn, run_id=run_id, workspace_id=table.workspace_id, table_id=table.id,
                              total=total, workflow_id=wid, kind=kind)
    inp = build_bulk_input(table, caller_of(principal), principal.plan, run_id=run_id, record_ids=ids,
                           filters=filters, column_ids=column_ids, chunks_per_run=state.settings.bulk_chunks_per_run)
    # no connection is held while Temporal answers (ops surface, docs/security.md): the run's
    # row is committed first, and ends `failed` if the workflow could not be started in time
    try:
        await state.temporal.start_workflow(
            BulkRunWorkflow.run, inp, id=wid, task_queue=state.settings.task_queue,
            execution_timeout=timedelta(days=7),
            memo={"workspace": table.workspace_id, "table": table.id, "run_id": run_id},
            rpc_timeout=timedelta(seconds=state.settings.temporal_rpc_timeout_s),
        )
    except RPCError as exc:
        async with state.db.connection() as conn:
            await runs.abandon(conn, run_id=run_id, previous=None, error=f"could not start: {exc.status.name}")
        raise Unavailable("the pipeline engine (Temporal) did not answer in time; nothing was started, retry shortly") from None
    out = {"run_id": run_id, "status": "running", "total": total, "done": 0, "failed": 0, "workflow_id": wid}
    if missing:
        out["missing"] = missing
    return out


async def run_actions(state: AppState, principal: Principal, table_ref: int | str, *,
                      record_ids: list[int] | None = None,
                      filters: list[dict[str, Any]] | dict[str, Any] | None = None,
                      column_ids: list[int] | None = None) -> dict[str, Any]:
    """Run computed columns (all, or ``column_ids``) over ``record_ids`` or every record
    matching ``filters`` (``[{column, op, value}]`` or ``{column: "op.value"}``), in the
    background: the run's first progress (see :func:`get_run`).

    Raises:
        ValidationError: ids and filters together, too many ids, a column that is not a
            computed column of the table, bad filters; Unavailable: Temporal is down.
    """
    require_writable(principal)
    table = await table_for(state, principal, table_ref, Action.UPDATE)
    if record_ids is not None and filters is not None:
        raise ValidationError("send record_ids or filters, not both")
    if record_ids is not None and len(record_ids) > MAX_IDS:
        raise ValidationError(f"at most {MAX_IDS} record_ids; use filters for more")
    if column_ids:
        for cid in column_ids:
            col = table.column_by_id(cid)
            if col is None or not col.computed:
                raise ValidationError(f"column {cid} is not a computed column of this table")
    items: list[dict[str, Any]] = []
    if isinstance(filters, dict):
        items = filter_items(parse_filter_object(filters))
    elif filters:
        items = filters
    if items:
        plan_filters(parse_filter_list(items), table)  # validate now: 400 before anything starts
    return await start_bulk(state, principal, table, record_ids=record_ids, filters=items, column_ids=column_ids)


# how Temporal may end a run's workflow without the run reporting its end: terminated (a
# history or message limit, an operator, a server-side check), timed out (its 7 days),
# failed or cancelled
_ENDED = {
    WorkflowExecutionStatus.TERMINATED: "was terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed out",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "was cancelled",
}


async def _settle(state: AppState, row: dict[str, Any]) -> dict[str, Any]:
    """A run still ``running`` whose workflow Temporal has ended: it ends ``failed``, the
    rows it did not do counted as failed, with the reason. Before, such a run read
    ``running`` for ever (a million-row backfill terminated by Temporal in its first 8 s
    stayed "running, 0 done"). The workflow is the latest execution of the run's workflow
    id, started after the run's row (a backfill's id is reused by the table's next
    backfill); anything else, or no answer within 2 s, leaves the row as it is."""
    wid = row.get("workflow_id")
    if state.temporal is None or not wid:
        return row
    try:
        d = await asyncio.wait_for(state.temporal.get_workflow_handle(wid).describe(), timeout=2.0)
    except Exception:  # not started yet, or Temporal unreachable: the row stands
        return row
    how = _ENDED.get(d.status) if d.status is not None else None
    created = row.get("created_at")
    if how is None or created is None or d.start_time is None or d.start_time < created:
        return row
    errors = dict(row.get("errors") or {})
    errors["error"] = (f"the run's workflow {how} before it finished ({d.status.name.lower()});"
                       " the rows it had not done were not computed")
    async with state.db.connection() as conn:
        await runs.set_progress(conn, run_id=row["id"], done=int(row["done"]),
                                failed=max(int(row["failed"]), int(row["total"]) - int(row["done"])),
                                status="failed", errors=errors)
        fresh = await runs.get_run(conn, workspace_id=row["workspace_id"], run_id=row["id"])
    return fresh or row


async def get_run(state: AppState, principal: Principal, run_id: str) -> dict[str, Any]:
    """Progress of a bulk run: total, done, failed, status, the Temporal workflow id, and
    the rows that failed (the first 100, with their errors by column).

    Raises:
        NotFound: no such run in the principal's workspace, or a run of a table the
            principal may not read (its failed rows name records and their errors).
    """
    async with state.db.connection() as conn:
        row = await runs.get_run(conn, workspace_id=principal.workspace_id, run_id=run_id)
    if row is None or (row.get("table_id") is not None and not principal.can(row["table_id"], Action.READ)):
        raise NotFound(f"run {run_id} not found")
    if row["status"] == "running":
        row = await _settle(state, row)
    errors = row.get("errors") or {}
    out = {k: row[k] for k in ("total", "done", "failed", "status", "workflow_id", "kind")} | {"run_id": row["id"]}
    out["failed_rows"] = errors.get("rows") or []
    if errors.get("superseded_by"):
        out["superseded_by"] = errors["superseded_by"]
    if errors.get("skipped") or errors.get("error"):
        out["reason"] = errors.get("skipped") or errors.get("error")
    return out
