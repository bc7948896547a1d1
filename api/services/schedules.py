"""Schedules of run-actions as Temporal Schedules (shared by REST and the builder tools).

Each schedule is a row in ``wds.schedules`` and a Temporal Schedule
``schedule/ws<ws>/t<table>/<id>`` (visible in the Temporal UI) whose action starts
``ScheduledRunWorkflow``; every firing creates its own run (``GET /runs/{run_id}``).
Firings use the rights of the token that last created or changed the schedule *as they are
at the firing* (a rotation is followed; revoked, expired or without the update grant, the
firing is skipped and its run says why). Overlapping
firings are skipped (a slow run is not stacked), and missed firings older than a minute
are not caught up after downtime.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.service import RPCError, RPCStatusCode

from activities.scheduled import ScheduledRunInput, run_id_for
from activities.snap import caller_of
from activities.types import Caller
from api.deps import require, require_writable, table_or_404
from api.state import AppState
from storage import refs, runs
from storage import schedules as sched
from storage.access import Action, Principal
from storage.errors import Conflict, NotFound, Unavailable, ValidationError
from storage.query import filter_items, parse_filter_list, parse_filter_object, plan_filters
from storage.schema import TableMeta
from storage.values import iso
from workflows.scheduled import ScheduledRunWorkflow

MIN_INTERVAL_S = 1
MAX_INTERVAL_S = 366 * 86400
CATCHUP = timedelta(minutes=1)
SPEC_KEYS = ("cron", "interval_seconds", "filters", "column_ids")


def normalize_filters(table: TableMeta, filters: list[dict[str, Any]] | dict[str, Any] | None) -> list[dict[str, Any]]:
    """Filters as ``[{column, op, value}]`` (from that form or ``{column: "op.value"}``), validated.

    Raises:
        ValidationError, UnknownColumn, UnknownOperator: the filters do not apply to ``table``.
    """
    if not filters:
        return []
    if isinstance(filters, dict):
        out = filter_items(parse_filter_object(filters))
    else:
        out = list(filters)
    plan_filters(parse_filter_list(out), table)
    return out


_CRON_MACROS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})


def _standard_cron(cron: str) -> bool:
    """Five fields of cron characters, or a named period (no time zone, no ``@every``).

    >>> [_standard_cron(c) for c in ("*/15 * * * *", "0 3 * * MON-FRI", "@daily", "@every 1s",
    ...                              "CRON_TZ=Europe/Paris 0 3 * * *", "0 3 * *")]
    [True, True, True, False, False, False]
    """
    text = cron.strip()
    if text.lower() in _CRON_MACROS:
        return True
    fields = text.split()
    return len(fields) == 5 and all(re.fullmatch(r"[0-9A-Za-z*/,?LW#-]+", f) for f in fields)


def _spec(table: TableMeta, data: dict[str, Any]) -> dict[str, Any]:
    cron, every = data.get("cron"), data.get("interval_seconds")
    if (cron is None) == (every is None):
        raise ValidationError("a schedule needs exactly one of cron or interval_seconds")
    if cron is not None and (not isinstance(cron, str) or not cron.strip() or len(cron) > 200):
        raise ValidationError("cron must be a cron expression such as '*/15 * * * *'")
    if isinstance(cron, str) and not _standard_cron(cron):
        # Temporal also reads "CRON_TZ=…" (cron is UTC here) and "@every 1s" (which skips
        # interval_seconds' bounds): refused, so what is stored is what the docs promise
        raise ValidationError("cron takes five fields in UTC ('*/15 * * * *') or @yearly, @monthly, @weekly,"
                              " @daily or @hourly; for a fixed period send interval_seconds")
    if every is not None and (isinstance(every, bool) or not isinstance(every, int)
                              or not MIN_INTERVAL_S <= every <= MAX_INTERVAL_S):
        raise ValidationError(f"interval_seconds must be an integer from {MIN_INTERVAL_S} to {MAX_INTERVAL_S}")
    column_ids = data.get("column_ids")
    if column_ids is not None:
        if not isinstance(column_ids, list) or not column_ids:
            raise ValidationError("column_ids must be a non-empty list of computed column ids")
        for cid in column_ids:
            col = table.column_by_id(cid) if isinstance(cid, int) else None
            if col is None or not col.computed:
                raise ValidationError(f"column {cid} is not a computed column of this table")
    return {"cron": cron.strip() if isinstance(cron, str) else None, "interval_seconds": every,
            "filters": refs.filters_by_id(table, normalize_filters(table, data.get("filters"))),
            "column_ids": column_ids}


def _temporal_schedule(state: AppState, row_id: int, table: TableMeta, spec: dict[str, Any],
                       caller: dict[str, Any], paused: bool) -> Schedule:
    inp = ScheduledRunInput(
        workspace_id=table.workspace_id, table_id=table.id, schedule_id=row_id, caller=Caller(**caller),
        filters=spec["filters"], column_ids=spec["column_ids"],
    )
    when = (ScheduleSpec(cron_expressions=[spec["cron"]]) if spec["cron"]
            else ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(seconds=spec["interval_seconds"]))]))
    return Schedule(
        action=ScheduleActionStartWorkflow(
            ScheduledRunWorkflow.run, inp,
            id=f"scheduled/ws{table.workspace_id}/t{table.id}/{row_id}",
            task_queue=state.settings.task_queue, execution_timeout=timedelta(days=7),
            memo={"workspace": table.workspace_id, "table": table.id, "schedule": row_id},
        ),
        spec=when,
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP, catchup_window=CATCHUP),
        state=ScheduleState(paused=paused, note="created paused" if paused else None),
    )


def schedule_out(row: dict[str, Any], table: TableMeta | None = None) -> dict[str, Any]:
    """The public shape of a schedule (the stored rights are not shown)."""
    spec = dict(row["spec"] or {})
    if table is not None and spec.get("filters"):
        spec["filters"] = refs.filters_by_name(table, spec["filters"])
    return {
        "id": row["id"], "table_id": row["table_id"], "name": row["name"],
        **{k: spec.get(k) for k in SPEC_KEYS}, "paused": row["paused"],
        "schedule_id": sched.temporal_id(workspace_id=row["workspace_id"], table_id=row["table_id"],
                                         schedule_id=row["id"]),
        "created_at": iso(row["created_at"]),
    }


def _rpc(state: AppState) -> timedelta:
    """The deadline of one Temporal call (``WDS_TEMPORAL_RPC_TIMEOUT_S``): past it 503 UNAVAILABLE."""
    return timedelta(seconds=state.settings.temporal_rpc_timeout_s)


def _client(state: AppState) -> Any:
    if state.temporal is None:
        raise Unavailable("the pipeline engine (Temporal) is not reachable; retry shortly")
    return state.temporal


def _temporal_error(exc: RPCError) -> Exception:
    if exc.status == RPCStatusCode.INVALID_ARGUMENT:
        return ValidationError(f"the schedule was refused: {exc.message}")
    if exc.status == RPCStatusCode.NOT_FOUND:
        return NotFound("the schedule does not exist in Temporal")
    return Unavailable("the pipeline engine (Temporal) did not accept the change; retry shortly")


async def _table(state: AppState, principal: Principal, table_ref: int | str, *, write: bool) -> TableMeta:
    table = table_or_404(await state.schema(principal.workspace_id), table_ref)
    if write:
        require_writable(principal)
        require(principal, table, Action.UPDATE)
    else:
        require(principal, table, Action.READ)
    return table


async def _row(state: AppState, table: TableMeta, schedule_id: int) -> dict[str, Any]:
    async with state.db.connection() as conn:
        row = await sched.get_schedule(conn, workspace_id=table.workspace_id, schedule_id=schedule_id)
    if row is None or row["table_id"] != table.id:
        raise NotFound(f"schedule {schedule_id} not found on table {table.id}")
    return row


async def create_schedule(state: AppState, principal: Principal, table_ref: int | str,
                          data: dict[str, Any]) -> dict[str, Any]:
    """Create a schedule ``{name, cron | interval_seconds, filters?, column_ids?, paused?}``.

    Raises:
        ValidationError: bad spec (incl. a cron Temporal refuses); Unavailable: no Temporal.
    """
    table = await _table(state, principal, table_ref, write=True)
    name = data.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 255:
        raise ValidationError("schedule name must be a non-empty string of at most 255 characters")
    spec = _spec(table, data)
    caller = caller_of(principal).__dict__
    paused = bool(data.get("paused", False))
    client = _client(state)
    # the row is committed first (its id names the Temporal Schedule), then Temporal is
    # called with no connection held; if Temporal refuses or does not answer in time the
    # row is deleted again (compensation), so a failed create leaves nothing behind
    async with state.db.transaction() as conn:
        row = await sched.create_schedule(conn, workspace_id=table.workspace_id, table_id=table.id,
                                          name=name.strip(), spec={**spec, "caller": caller}, paused=paused)
    try:
        await client.create_schedule(
            schedule_out(row)["schedule_id"], _temporal_schedule(state, row["id"], table, spec, caller, paused),
            memo={"workspace": table.workspace_id, "table": table.id, "name": row["name"]},
            rpc_timeout=_rpc(state),
        )
    except (ScheduleAlreadyRunningError, RPCError) as exc:
        async with state.db.connection() as conn:
            await sched.delete_schedule(conn, workspace_id=table.workspace_id, schedule_id=row["id"])
        if isinstance(exc, ScheduleAlreadyRunningError):
            raise Conflict("a Temporal schedule with this id already exists") from None
        raise _temporal_error(exc) from None
    return schedule_out(row, table)


async def list_schedules(state: AppState, principal: Principal, table_ref: int | str) -> list[dict[str, Any]]:
    table = await _table(state, principal, table_ref, write=False)
    async with state.db.connection() as conn:
        rows = await sched.list_schedules(conn, workspace_id=table.workspace_id, table_id=table.id)
    return [schedule_out(r, table) for r in rows]


async def get_schedule(state: AppState, principal: Principal, table_ref: int | str,
                       schedule_id: int) -> dict[str, Any]:
    """A schedule with its next firing times and recent runs (from Temporal)."""
    table = await _table(state, principal, table_ref, write=False)
    out = schedule_out(await _row(state, table, schedule_id), table)
    try:
        desc = await _client(state).get_schedule_handle(out["schedule_id"]).describe(rpc_timeout=_rpc(state))
    except RPCError as exc:
        raise _temporal_error(exc) from None
    out["next_run_at"] = [iso(t) for t in desc.info.next_action_times[:5]]
    recent = [
        {"run_id": run_id_for(a.action.workflow_id), "workflow_id": a.action.workflow_id,
         "started_at": iso(a.started_at)}
        for a in desc.info.recent_actions
    ]
    # each firing's outcome from its run row: a skipped firing says why (e.g. a revoked token)
    async with state.db.connection() as conn:
        found = await runs.runs_by_id(conn, workspace_id=table.workspace_id, run_ids=[x["run_id"] for x in recent])
    for x in recent:
        run = found.get(x["run_id"])
        x["status"] = run["status"] if run else None
        x["skipped_reason"] = (run["errors"] or {}).get("skipped") if run else None
    out["recent_runs"] = recent
    return out


async def update_schedule(state: AppState, principal: Principal, table_ref: int | str, schedule_id: int,
                          changes: dict[str, Any]) -> dict[str, Any]:
    """Change name, timing (cron or interval_seconds), filters, column_ids or paused."""
    table = await _table(state, principal, table_ref, write=True)
    row = await _row(state, table, schedule_id)
    name = changes.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip() or len(name) > 255):
        raise ValidationError("schedule name must be a non-empty string of at most 255 characters")
    new_spec = None
    if any(k in changes for k in SPEC_KEYS):
        merged = {k: v for k, v in (row["spec"] or {}).items() if k in SPEC_KEYS}
        merged["filters"] = refs.filters_by_name(table, merged.get("filters") or [])
        if "cron" in changes or "interval_seconds" in changes:
            merged["cron"], merged["interval_seconds"] = changes.get("cron"), changes.get("interval_seconds")
        for k in ("filters", "column_ids"):
            if k in changes:
                merged[k] = changes[k]
        new_spec = _spec(table, merged)
    paused = changes.get("paused")
    client = _client(state)
    handle = client.get_schedule_handle(schedule_out(row)["schedule_id"])
    caller = caller_of(principal).__dict__
    # Temporal first, with no connection held: if it refuses or does not answer in time
    # nothing changed anywhere (503/400); the row is written only once Temporal took it
    new_paused = bool(paused) if paused is not None else row["paused"]
    try:
        if new_spec is not None:
            schedule = _temporal_schedule(state, schedule_id, table, new_spec, caller, new_paused)

            def updater(_: ScheduleUpdateInput) -> ScheduleUpdate:
                return ScheduleUpdate(schedule=schedule)

            await handle.update(updater, rpc_timeout=_rpc(state))
        elif paused is not None and bool(paused) != row["paused"]:
            await (handle.pause(note="paused through the API", rpc_timeout=_rpc(state)) if paused
                   else handle.unpause(rpc_timeout=_rpc(state)))
    except RPCError as exc:
        raise _temporal_error(exc) from None
    async with state.db.transaction() as conn:
        updated = await sched.update_schedule(
            conn, workspace_id=table.workspace_id, schedule_id=schedule_id, name=name.strip() if name else None,
            spec={**new_spec, "caller": caller} if new_spec is not None else None,
            paused=bool(paused) if paused is not None else None,
        )
    if updated is None:
        raise NotFound(f"schedule {schedule_id} not found on table {table.id}")
    return schedule_out(updated, table)


async def set_paused(state: AppState, principal: Principal, table_ref: int | str, schedule_id: int,
                     paused: bool) -> dict[str, Any]:
    """Pause or unpause a schedule."""
    return await update_schedule(state, principal, table_ref, schedule_id, {"paused": paused})


async def trigger_schedule(state: AppState, principal: Principal, table_ref: int | str,
                           schedule_id: int) -> dict[str, Any]:
    """Fire a schedule now (even if paused); the run shows in ``get_schedule``'s recent runs."""
    table = await _table(state, principal, table_ref, write=True)
    row = await _row(state, table, schedule_id)
    try:
        await _client(state).get_schedule_handle(schedule_out(row)["schedule_id"]).trigger(
            overlap=ScheduleOverlapPolicy.ALLOW_ALL, rpc_timeout=_rpc(state),
        )
    except RPCError as exc:
        raise _temporal_error(exc) from None
    return {"id": schedule_id, "triggered": True}


async def delete_schedule(state: AppState, principal: Principal, table_ref: int | str,
                          schedule_id: int) -> dict[str, Any]:
    """Delete the Temporal Schedule and the row (a schedule already gone in Temporal is fine)."""
    table = await _table(state, principal, table_ref, write=True)
    row = await _row(state, table, schedule_id)
    try:
        await _client(state).get_schedule_handle(schedule_out(row)["schedule_id"]).delete(rpc_timeout=_rpc(state))
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise _temporal_error(exc) from None
    async with state.db.connection() as conn:
        await sched.delete_schedule(conn, workspace_id=table.workspace_id, schedule_id=schedule_id)
    return {"id": schedule_id, "deleted": True}


async def delete_table_schedules(state: AppState, *, workspace_id: int, table_id: int) -> None:
    """Remove the Temporal Schedules of a table being deleted (rows cascade with the table)."""
    if state.temporal is None:
        return
    async with state.db.connection() as conn:
        rows = await sched.list_schedules(conn, workspace_id=workspace_id, table_id=table_id)
    for row in rows:
        try:
            await state.temporal.get_schedule_handle(schedule_out(row)["schedule_id"]).delete(rpc_timeout=_rpc(state))
        except RPCError:
            pass  # already gone; firings of a missing table are skipped anyway
