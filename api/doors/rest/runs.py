"""Running computed columns on demand: a record's pipeline, one cell, or a bulk run (the
operations are in :mod:`api.ops.runs`)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from api.deps import RestPrincipal, StateDep
from api.ops import runs as ops
from api.responses import JSON
from api.schemas import ERRORS, RunActionsIn, RunIn

router = APIRouter(prefix="/functions/v1/rest-api", tags=["runs"])


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
    # the records that matched when the run started, plus those created since that it
    # reached (a backfill pages the whole table): never less than done + failed
    total: int
    done: int = 0
    failed: int = 0
    workflow_id: str | None = None
    kind: str | None = None  # run_actions | schedule | backfill | embeddings
    failed_rows: list[FailedRow] = Field(default_factory=list)
    # run-actions given record_ids: those that are no record of the table (nothing ran for
    # them; the first 100), in the answer that starts the run
    missing: list[int] | None = None
    superseded_by: str | None = None
    # why a schedule firing was skipped (status skipped) or a run could not start (failed)
    reason: str | None = None


@router.post("/tables/{table_id}/records/{record_id}/run", responses=ERRORS)
async def run_record(table_id: int, record_id: str, body: RunIn, principal: RestPrincipal, state: StateDep) -> JSON:
    """Re-run the record's pipeline as if ``changed_columns`` had changed (mode edit), or
    every computed column (mode create). Returns ``{record, pipeline}``."""
    return JSON(await ops.run_record(state, principal, table_id, record_id, mode=body.mode,
                                     changed_columns=body.changed_columns))


@router.post("/tables/{table_id}/records/{record_id}/compute/{column:path}", responses=ERRORS)
async def compute_cell(table_id: int, record_id: str, column: str, principal: RestPrincipal, state: StateDep) -> JSON:
    """Re-run exactly one computed column of one record (its name, URL-encoded, or its
    id); nothing else runs."""
    return JSON(await ops.compute_cell(state, principal, table_id, record_id, column))


@router.post("/tables/{table_id}/run-actions", status_code=202, response_model=RunOut, responses=ERRORS)
async def run_actions(table_id: int, body: RunActionsIn, principal: RestPrincipal, state: StateDep) -> JSON:
    """Run computed columns (all, or ``column_ids``) over ``record_ids`` or every record
    matching ``filters`` (``[{column, op, value}]`` or ``{column: "op.value"}``)."""
    out = await ops.run_actions(state, principal, table_id, record_ids=body.record_ids, filters=body.filters,
                                column_ids=body.column_ids)
    return JSON(out, status_code=202)


@router.get("/runs/{run_id}", response_model=RunOut, responses=ERRORS)
async def get_run(run_id: str, principal: RestPrincipal, state: StateDep) -> JSON:
    """Progress of a bulk run: total, done, failed, status, the Temporal workflow id, and
    the rows that failed (the first 100, with their errors by column)."""
    return JSON(await ops.get_run(state, principal, run_id))
