"""Builder tools for schedules: a Temporal Schedule per row of ``wds.schedules`` that runs
the bulk workflow (the same ``BulkRunWorkflow`` as run-actions) over a table.

The row keeps what the builder asked for (``spec``: cron or interval, columns, filters);
the Temporal Schedule carries a ready ``BulkInput`` (a snapshot of the table), refreshed
whenever the schedule is updated or triggered. Progress of the latest firing is the run
``sched-<workspace>-<id>`` (``GET {rest}/runs/<run_id>``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from psycopg.types.json import Jsonb
from temporalio.client import (
    Schedule, ScheduleActionStartWorkflow, ScheduleIntervalSpec, ScheduleSpec, ScheduleState, ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.service import RPCError, RPCStatusCode

from activities.snap import caller_of, table_snap
from activities.types import BulkInput
from api.deps import table_or_404
from api.mcp.builder.common import builder, positive_id
from api.mcp.spec import ID_OR_NAME, TABLE_ID, ToolSpec, array, boolean, integer, jsonable, obj, out, string
from api.mcp.tools_data import table_for
from api.pipelines import dependants_map
from api.state import AppState
from storage import runs
from storage.access import Action, Principal
from storage.errors import NotFound, Unavailable, ValidationError
from storage.pipelines import plan_steps
from storage.plans import plan as plan_of
from storage.query import parse_filter_list, parse_filter_object, plan_filters
from storage.schema import TableMeta
from workflows.bulk import BulkRunWorkflow

MIN_INTERVAL_S = 60


def _temporal(state: AppState) -> Any:
    if state.temporal is None:
        raise Unavailable("the pipeline engine (Temporal) is not reachable; schedules cannot be changed now")
    return state.temporal


def temporal_id(workspace_id: int, schedule_id: int) -> str:
    return f"wds-schedule/ws{workspace_id}/s{schedule_id}"


def run_id_of(workspace_id: int, schedule_id: int) -> str:
    return f"sched-{workspace_id}-{schedule_id}"


def _clean_spec(table: TableMeta, args: dict[str, Any], current: dict[str, Any] | None) -> dict[str, Any]:
    spec = dict(current or {})
    if "cron" in args or "every_seconds" in args:
        spec.pop("cron", None)
        spec.pop("every_seconds", None)
        spec.update({k: args[k] for k in ("cron", "every_seconds") if k in args})
    if ("cron" in spec) == ("every_seconds" in spec):
        raise ValidationError("give exactly one of cron (e.g. \"0 * * * *\") or every_seconds")
    if "every_seconds" in spec and spec["every_seconds"] < MIN_INTERVAL_S:
        raise ValidationError(f"every_seconds must be at least {MIN_INTERVAL_S}")
    if "cron" in spec and len(spec["cron"].split()) not in (5, 6, 7) and not spec["cron"].startswith("@"):
        raise ValidationError("cron must be a cron expression like \"0 9 * * 1-5\" or @daily/@hourly")
    if "columns" in args:
        ids = []
        for ref in args["columns"]:
            col = table.column_ref(ref)
            if col is None or not col.computed:
                raise ValidationError(f"{ref!r} is not a computed column of table {table.name!r}")
            ids.append(col.id)
        spec["column_ids"] = ids
    if "filters" in args:
        raw = args["filters"]
        parsed = parse_filter_object(raw) if isinstance(raw, dict) else parse_filter_list(raw)
        plan_filters(parsed, table)  # refuse bad filters now, not at 3 a.m.
        spec["filters"] = [{"column": f.column, "op": ("not." if f.negate else "") + f.op.value,
                            "value": list(f.value) if isinstance(f.value, tuple) else f.value} for f in parsed]
    return spec


def _schedule(state: AppState, principal: Principal, table: TableMeta, row_id: int, spec: dict[str, Any],
              paused: bool) -> Schedule:
    column_ids = spec.get("column_ids") or None
    levels = plan_steps(table, mode="edit", only=column_ids) if column_ids else plan_steps(table, mode="create")
    p = plan_of(principal.plan)
    inp = BulkInput(
        run_id=run_id_of(table.workspace_id, row_id), table=table_snap(table), caller=caller_of(principal),
        levels=[[c.id for c in lvl] for lvl in levels], dependants=dependants_map(table), record_ids=None,
        filters=spec.get("filters", []), mode="edit" if column_ids else "create",
        time_budget_s=float(p.pipeline_seconds_per_row), step_budget=p.pipeline_steps_per_row,
    )
    when = (ScheduleSpec(cron_expressions=[spec["cron"]]) if "cron" in spec
            else ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(seconds=spec["every_seconds"]))]))
    action = ScheduleActionStartWorkflow(
        BulkRunWorkflow.run, inp, id=f"bulk/ws{table.workspace_id}/t{table.id}/{inp.run_id}",
        task_queue=state.settings.task_queue, execution_timeout=timedelta(days=1),
        memo={"workspace": table.workspace_id, "table": table.id, "schedule": row_id},
    )
    return Schedule(action=action, spec=when, state=ScheduleState(paused=paused, note="wds"))


async def _row(state: AppState, principal: Principal, schedule_id: Any) -> dict[str, Any]:
    sid = positive_id(schedule_id, "schedule_id")
    async with state.db.connection() as conn:
        cur = await conn.execute("SELECT * FROM wds.schedules WHERE id = %s AND workspace_id = %s",
                                 (sid, principal.workspace_id))
        row = await cur.fetchone()
    if row is None:
        raise NotFound(f"schedule {sid} not found")
    return row


def _out(row: dict[str, Any]) -> dict[str, Any]:
    return {**jsonable(row), "run_id": run_id_of(row["workspace_id"], row["id"]),
            "temporal_schedule_id": temporal_id(row["workspace_id"], row["id"])}


async def _replace(state: AppState, principal: Principal, row: dict[str, Any], table: TableMeta) -> None:
    """Point the Temporal Schedule at a fresh action and spec, keeping its paused state."""
    new = _schedule(state, principal, table, row["id"], row["spec"], row["paused"])

    def updater(inp: ScheduleUpdateInput) -> ScheduleUpdate:
        new.state = inp.description.schedule.state
        return ScheduleUpdate(schedule=new)

    await _temporal(state).get_schedule_handle(temporal_id(row["workspace_id"], row["id"])).update(updater)


async def list_schedules(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table_id = (await table_for(state, principal, args["table_id"], Action.READ)).id if "table_id" in args else None
    async with state.db.connection() as conn:
        cur = await conn.execute(
            "SELECT * FROM wds.schedules WHERE workspace_id = %s AND (%s::bigint IS NULL OR table_id = %s)"
            " ORDER BY id", (principal.workspace_id, table_id, table_id))
        rows = await cur.fetchall()
    return {"schedules": [_out(r) for r in rows]}


async def create_schedule(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table = await table_for(state, principal, args["table_id"], Action.UPDATE)
    client = _temporal(state)
    spec = _clean_spec(table, args, None)
    paused = bool(args.get("paused", False))
    try:
        # the row and the Temporal Schedule appear together: a Temporal failure rolls the row back
        async with state.db.transaction() as conn:
            cur = await conn.execute(
                "INSERT INTO wds.schedules (workspace_id, table_id, name, spec, paused) VALUES (%s, %s, %s, %s, %s)"
                " RETURNING *", (principal.workspace_id, table.id, args["name"], Jsonb(spec), paused))
            row = await cur.fetchone()
            assert row is not None
            await runs.create_run(conn, run_id=run_id_of(principal.workspace_id, row["id"]),
                                  workspace_id=principal.workspace_id, table_id=table.id, total=0,
                                  workflow_id="", kind="schedule")
            await conn.execute("UPDATE wds.runs SET status = 'scheduled' WHERE id = %s",
                               (run_id_of(principal.workspace_id, row["id"]),))
            await client.create_schedule(temporal_id(principal.workspace_id, row["id"]),
                                         _schedule(state, principal, table, row["id"], spec, paused))
    except RPCError as exc:
        raise Unavailable(f"Temporal refused the schedule: {exc.message}") from None
    return _out(row)


async def update_schedule(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    row = await _row(state, principal, args["schedule_id"])
    table = table_or_404(await state.schema(principal.workspace_id), row["table_id"])
    spec = _clean_spec(table, args, row["spec"])
    async with state.db.transaction() as conn:
        cur = await conn.execute("UPDATE wds.schedules SET name = %s, spec = %s WHERE id = %s RETURNING *",
                                 (args.get("name", row["name"]), Jsonb(spec), row["id"]))
        row = await cur.fetchone()
        assert row is not None
        await _call(_replace(state, principal, row, table))
    return _out(row)


async def _call(aw: Any) -> Any:
    try:
        return await aw
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise NotFound("the schedule is missing from Temporal; delete and re-create it") from None
        raise Unavailable(f"Temporal refused the change: {exc.message}") from None


async def delete_schedule(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    row = await _row(state, principal, args["schedule_id"])
    handle = _temporal(state).get_schedule_handle(temporal_id(row["workspace_id"], row["id"]))
    try:
        await handle.delete()
    except RPCError as exc:
        if exc.status is not RPCStatusCode.NOT_FOUND:  # already gone is fine
            raise Unavailable(f"Temporal refused the change: {exc.message}") from None
    async with state.db.connection() as conn:
        await conn.execute("DELETE FROM wds.schedules WHERE id = %s", (row["id"],))
    return {"id": row["id"], "deleted": True}


async def pause_schedule(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    row = await _row(state, principal, args["schedule_id"])
    paused = bool(args.get("paused", True))
    handle = _temporal(state).get_schedule_handle(temporal_id(row["workspace_id"], row["id"]))
    await _call(handle.pause(note="paused by builder") if paused else handle.unpause(note="resumed by builder"))
    async with state.db.connection() as conn:
        cur = await conn.execute("UPDATE wds.schedules SET paused = %s WHERE id = %s RETURNING *", (paused, row["id"]))
        row = await cur.fetchone()
    assert row is not None
    return _out(row)


async def trigger_schedule(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    row = await _row(state, principal, args["schedule_id"])
    table = table_or_404(await state.schema(principal.workspace_id), row["table_id"])
    await _call(_replace(state, principal, row, table))  # run against today's columns, not the old snapshot
    await _call(_temporal(state).get_schedule_handle(temporal_id(row["workspace_id"], row["id"])).trigger())
    return {**_out(row), "triggered": True}


_SID = integer("the schedule's id")
_WHEN = {
    "cron": string("cron expression (UTC), e.g. \"0 9 * * 1-5\" or @daily"),
    "every_seconds": integer(f"run every N seconds (at least {MIN_INTERVAL_S})", minimum=MIN_INTERVAL_S),
    "columns": array({"type": ID_OR_NAME}, "computed columns to run (default: all)"),
    "filters": {"type": ["object", "array"], "description": "only records matching {\"Column\": \"op.value\"}"},
}
_SCHED_OUT = out({"id": {"type": "integer"}, "name": {"type": "string"}, "spec": {"type": "object"},
                  "paused": {"type": "boolean"}, "run_id": {"type": "string"}}, ("id",))

SCHEDULE_TOOLS: list[ToolSpec] = [
    builder("list_schedules", "List schedules", "Schedules of the workspace (or of one table).",
            list_schedules, obj({"table_id": TABLE_ID}), out({"schedules": {"type": "array"}}, ("schedules",)),
            read_only=True, idempotent=True),
    builder("create_schedule", "Create a schedule",
            "Run a table's computed columns over its records (or those matching filters) on a cron or interval,"
            " as a Temporal Schedule.",
            create_schedule, obj({"table_id": TABLE_ID, "name": string("schedule name"), **_WHEN,
                                  "paused": boolean("create paused")}, ("table_id", "name")), _SCHED_OUT),
    builder("update_schedule", "Update a schedule", "Change a schedule's name, timing, columns or filters.",
            update_schedule, obj({"schedule_id": _SID, "name": string("new name"), **_WHEN}, ("schedule_id",)),
            _SCHED_OUT, idempotent=True),
    builder("delete_schedule", "Delete a schedule", "Delete a schedule; runs already started finish.",
            delete_schedule, obj({"schedule_id": _SID}, ("schedule_id",)),
            out({"id": {"type": "integer"}, "deleted": {"type": "boolean"}}, ("id", "deleted")),
            destructive=True, idempotent=True),
    builder("pause_schedule", "Pause or resume a schedule", "Pause (default) or resume a schedule.",
            pause_schedule, obj({"schedule_id": _SID, "paused": boolean("true pauses, false resumes")},
                                ("schedule_id",)), _SCHED_OUT, idempotent=True),
    builder("trigger_schedule", "Trigger a schedule now", "Start one run of a schedule immediately.",
            trigger_schedule, obj({"schedule_id": _SID}, ("schedule_id",)), _SCHED_OUT),
]
