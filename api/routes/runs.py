"""Running computed columns on demand: a record's pipeline, one cell, or a bulk run."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from temporalio.service import RPCError

from activities.bulkplan import build_bulk_input
from activities.snap import caller_of
from api.deps import RestPrincipal, StateDep, require, require_writable, table_or_404
from api.limits import charge_automation_runs
from api.pipelines import run_after_write
from api.responses import JSON
from api.routes.records import _record_id
from api.schemas import ERRORS
from api.state import AppState
from storage import records as rec
from storage import runs
from storage.access import Action, Principal
from storage.errors import NotFound, Unavailable, UnknownColumn, ValidationError
from storage.query import filter_items, parse_filter_list, parse_filter_object, plan_filters
from storage.schema import TableMeta
from storage.values import decode_value
from workflows.bulk import BulkRunWorkflow

router = APIRouter(prefix="/functions/v1/rest-api", tags=["runs"])
MAX_IDS = 100_000


class RunIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["edit", "create"] = "edit"
    changed_columns: list[str] = Field(default_factory=list)


class RunActionsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    record_ids: list[int] | None = None
    filters: list[dict[str, Any]] | dict[str, Any] | None = None
    column_ids: list[int] | None = None


class FailedRow(BaseModel):
    id: int
    errors: dict[str, str]  # column name → error


class RunOut(BaseModel):
    """A bulk run's progress. ``status``: running, completed (every row succeeded),
    completed_with_errors (``failed`` rows failed after a retry; the first
    100 are in ``failed_rows``), failed, cancelled, superseded (a newer backfill of the
    table took over: ``superseded_by``) or skipped (a schedule firing that touched nothing,
    e.g. its token was revoked: ``reason``)."""

    run_id: str
    status: str
    total: int
    done: int = 0
    failed: int = 0
    workflow_id: str | None = None
    kind: str | None = None  # run_actions | schedule | backfill | embeddings
    failed_rows: list[FailedRow] = Field(default_factory=list)
    superseded_by: str | None = None
    # why a schedule firing was skipped (status skipped) or a run could not start (failed)
    reason: str | None = None


async def _row(state: AppState, principal: Principal, table_id: int, record_id: str) -> tuple[TableMeta, dict[str, Any]]:
    require_writable(principal)
    table = table_or_404(await state.schema(principal.workspace_id), table_id)
    require(principal, table, Action.UPDATE)
    async with state.db.connection() as conn:
        row = await rec.get_record_row(conn, table=table, record_id=_record_id(record_id))
    if row is None:
        raise NotFound(f"record {record_id} not found")
    return table, row


@router.post("/tables/{table_id}/records/{record_id}/run", responses=ERRORS)
async def run_record(table_id: int, record_id: str, body: RunIn, principal: RestPrincipal, state: StateDep) -> JSON:
    """Re-run the record's pipeline as if ``changed_columns`` had changed (mode edit), or
    every computed column (mode create). Returns ``{record, pipeline}``."""
    table, row = await _row(state, principal, table_id, record_id)
    unknown = [c for c in body.changed_columns if table.column(c) is None]
    if unknown:
        raise UnknownColumn(f"unknown column(s): {', '.join(unknown)}")
    rows, outcome = await run_after_write(state, principal, table, [row], mode=body.mode, changed=body.changed_columns)
    record = rec.row_to_record(table, rows[0])
    return JSON({"record": record, "pipeline": outcome or {"status": "ok", "run_id": None, "errors": {}}})


@router.post("/tables/{table_id}/records/{record_id}/compute/{column}", responses=ERRORS)
async def compute_cell(table_id: int, record_id: str, column: str, principal: RestPrincipal, state: StateDep) -> JSON:
    """Re-run exactly one computed column of one record; nothing else runs."""
    table, row = await _row(state, principal, table_id, record_id)
    col = table.column(column)
    if col is None:
        raise UnknownColumn(f"unknown column {column!r}")
    if not col.computed:
        raise ValidationError(f"column {column!r} is not computed")
    rows, outcome = await run_after_write(state, principal, table, [row], mode="edit", changed=None, only=[col.id])
    value = decode_value(col, rows[0].get(col.physical))
    out: dict[str, Any] = {"record_id": rows[0]["id"], "column": col.name, "value": value}
    if outcome is not None:
        out["pipeline"] = outcome
    return JSON(out)


async def start_bulk(
    state: AppState, principal: Principal, table: TableMeta, *, record_ids: list[int] | None,
    filters: list[dict[str, Any]], column_ids: list[int] | None, kind: str = "run_actions",
) -> dict[str, Any]:
    """Start a bulk run over ids or filters (shared by run-actions, schedules and MCP)."""
    if state.temporal is None:
        raise Unavailable("the pipeline engine (Temporal) is not reachable; retry shortly")
    planned = plan_filters(parse_filter_list(filters), table) if filters else ()
    async with state.db.connection() as conn:
        if record_ids is not None:
            ids = sorted(await rec.existing_ids(conn, table=table, ids=record_ids))
            total = len(ids)
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
                           filters=filters, column_ids=column_ids)
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
    return {"run_id": run_id, "status": "running", "total": total, "done": 0, "failed": 0, "workflow_id": wid}


@router.post("/tables/{table_id}/run-actions", status_code=202, response_model=RunOut, responses=ERRORS)
async def run_actions(table_id: int, body: RunActionsIn, principal: RestPrincipal, state: StateDep) -> JSON:
    """Run computed columns (all, or ``column_ids``) over ``record_ids`` or every record
    matching ``filters`` (``[{column, op, value}]`` or ``{column: "op.value"}``)."""
    require_writable(principal)
    table = table_or_404(await state.schema(principal.workspace_id), table_id)
    require(principal, table, Action.UPDATE)
    if body.record_ids is not None and body.filters is not None:
        raise ValidationError("send record_ids or filters, not both")
    if body.record_ids is not None and len(body.record_ids) > MAX_IDS:
        raise ValidationError(f"at most {MAX_IDS} record_ids; use filters for more")
    if body.column_ids:
        for cid in body.column_ids:
            col = table.column_by_id(cid)
            if col is None or not col.computed:
                raise ValidationError(f"column {cid} is not a computed column of this table")
    filters: list[dict[str, Any]] = []
    if isinstance(body.filters, dict):
        filters = filter_items(parse_filter_object(body.filters))
    elif body.filters:
        filters = body.filters
    if filters:
        plan_filters(parse_filter_list(filters), table)  # validate now: 400 before anything starts
    out = await start_bulk(state, principal, table, record_ids=body.record_ids, filters=filters,
                           column_ids=body.column_ids)
    return JSON(out, status_code=202)


@router.get("/runs/{run_id}", response_model=RunOut, responses=ERRORS)
async def get_run(run_id: str, principal: RestPrincipal, state: StateDep) -> JSON:
    """Progress of a bulk run: total, done, failed, status, the Temporal workflow id, and
    the rows that failed (the first 100, with their errors by column)."""
    async with state.db.connection() as conn:
        row = await runs.get_run(conn, workspace_id=principal.workspace_id, run_id=run_id)
    if row is None:
        raise NotFound(f"run {run_id} not found")
    errors = row.get("errors") or {}
    out = {k: row[k] for k in ("total", "done", "failed", "status", "workflow_id", "kind")} | {"run_id": row["id"]}
    out["failed_rows"] = errors.get("rows") or []
    if errors.get("superseded_by"):
        out["superseded_by"] = errors["superseded_by"]
    if errors.get("skipped") or errors.get("error"):
        out["reason"] = errors.get("skipped") or errors.get("error")
    return JSON(out)
