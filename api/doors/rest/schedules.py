"""Schedules of run-actions for a table (Temporal Schedules; see ``api/services/schedules.py``).

``GET/POST {rest}/tables/{id}/schedules``, ``GET/PATCH/DELETE .../schedules/{sid}``,
``POST .../{sid}/pause``, ``.../unpause``, ``.../trigger``. A schedule is ``{name,
cron | interval_seconds, filters?, column_ids?, paused?}``; each firing is a run with
progress at ``GET {rest}/runs/{run_id}`` (``recent_runs`` of ``GET .../{sid}``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from api.deps import RestPrincipal, StateDep
from api.responses import JSON
from api.schemas import ERRORS, Deleted
from api.services import schedules

router = APIRouter(prefix="/functions/v1/rest-api/tables/{table_id}/schedules", tags=["schedules"])
Filters = list[dict[str, Any]] | dict[str, Any] | None


class ScheduleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=255)
    cron: str | None = Field(default=None, description="cron expression, e.g. '*/15 * * * *' (UTC)")
    interval_seconds: int | None = Field(default=None, description="fire every N seconds (instead of cron)")
    filters: Filters = Field(default=None, description="[{column, op, value}] or {column: 'op.value'}")
    column_ids: list[int] | None = Field(default=None, description="run only these computed columns")
    paused: bool = False


class SchedulePatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, min_length=1, max_length=255)
    cron: str | None = None
    interval_seconds: int | None = None
    filters: Filters = None
    column_ids: list[int] | None = None
    paused: bool | None = None


class RecentRun(BaseModel):
    run_id: str
    workflow_id: str
    started_at: str | None
    # the firing's run status (null until its run row exists); a skipped firing says why
    status: str | None = None
    skipped_reason: str | None = None


class ScheduleOut(BaseModel):
    id: int
    table_id: int
    name: str
    cron: str | None
    interval_seconds: int | None
    filters: list[dict[str, Any]]
    column_ids: list[int] | None
    paused: bool
    schedule_id: str
    created_at: str
    next_run_at: list[str] | None = None
    recent_runs: list[RecentRun] | None = None


class Triggered(BaseModel):
    id: int
    triggered: bool


@router.get("", response_model=list[ScheduleOut], responses=ERRORS)
async def list_schedules(table_id: int, principal: RestPrincipal, state: StateDep) -> JSON:
    return JSON(await schedules.list_schedules(state, principal, table_id))


@router.post("", status_code=201, response_model=ScheduleOut, responses=ERRORS)
async def create_schedule(table_id: int, body: ScheduleIn, principal: RestPrincipal, state: StateDep) -> JSON:
    """Create a schedule (a Temporal Schedule named ``schedule/ws<ws>/t<table>/<id>``)."""
    out = await schedules.create_schedule(state, principal, table_id, body.model_dump(exclude_unset=True))
    return JSON(out, status_code=201)


@router.get("/{schedule_id}", response_model=ScheduleOut, responses=ERRORS)
async def get_schedule(table_id: int, schedule_id: int, principal: RestPrincipal, state: StateDep) -> JSON:
    """A schedule with its next firing times and recent runs."""
    return JSON(await schedules.get_schedule(state, principal, table_id, schedule_id))


@router.patch("/{schedule_id}", response_model=ScheduleOut, responses=ERRORS)
async def patch_schedule(
    table_id: int, schedule_id: int, body: SchedulePatch, principal: RestPrincipal, state: StateDep
) -> JSON:
    """Change name, timing (send cron or interval_seconds), filters, column_ids or paused."""
    changes = body.model_dump(exclude_unset=True)
    return JSON(await schedules.update_schedule(state, principal, table_id, schedule_id, changes))


@router.delete("/{schedule_id}", response_model=Deleted, responses=ERRORS)
async def delete_schedule(table_id: int, schedule_id: int, principal: RestPrincipal, state: StateDep) -> JSON:
    return JSON(await schedules.delete_schedule(state, principal, table_id, schedule_id))


@router.post("/{schedule_id}/pause", response_model=ScheduleOut, responses=ERRORS)
async def pause_schedule(table_id: int, schedule_id: int, principal: RestPrincipal, state: StateDep) -> JSON:
    return JSON(await schedules.set_paused(state, principal, table_id, schedule_id, True))


@router.post("/{schedule_id}/unpause", response_model=ScheduleOut, responses=ERRORS)
async def unpause_schedule(table_id: int, schedule_id: int, principal: RestPrincipal, state: StateDep) -> JSON:
    return JSON(await schedules.set_paused(state, principal, table_id, schedule_id, False))


@router.post("/{schedule_id}/trigger", status_code=202, response_model=Triggered, responses=ERRORS)
async def trigger_schedule(table_id: int, schedule_id: int, principal: RestPrincipal, state: StateDep) -> JSON:
    """Fire the schedule now (also when paused)."""
    return JSON(await schedules.trigger_schedule(state, principal, table_id, schedule_id), status_code=202)
