"""Builder tools for schedules: thin wrappers over :mod:`api.services.schedules` (shared with the
REST schedules routes), so a schedule made here is the same Temporal Schedule running
``ScheduledRunWorkflow``, each firing with its own run (``GET {rest}/runs/<run_id>``).

Tools name a schedule by its id alone; the table it belongs to is looked up here.
"""

from __future__ import annotations

from typing import Any

from api.doors.mcp.builder.common import builder, column_ids, positive_id
from api.doors.mcp.spec import ID_OR_NAME, TABLE_ID, ToolSpec, array, boolean, integer, obj, out, string
from api.ops.access import table_for
from api.services import schedules as api_schedules
from api.state import AppState
from storage import schedules as sched
from storage.access import Action, Principal
from storage.errors import NotFound

_SPEC_ARGS = ("cron", "interval_seconds", "filters", "paused", "name")


async def _table_of(state: AppState, principal: Principal, schedule_id: Any) -> tuple[int, int]:
    sid = positive_id(schedule_id, "schedule_id")
    async with state.db.connection() as conn:
        row = await sched.get_schedule(conn, workspace_id=principal.workspace_id, schedule_id=sid)
    if row is None:
        raise NotFound(f"schedule {sid} not found")
    return row["table_id"], sid


async def _data(state: AppState, principal: Principal, table_ref: Any, args: dict[str, Any]) -> dict[str, Any]:
    data = {k: args[k] for k in _SPEC_ARGS if k in args}
    if "columns" in args:
        table = await table_for(state, principal, table_ref, Action.READ)
        data["column_ids"] = column_ids(table, args["columns"])
    return data


async def list_schedules(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    if "table_id" in args:
        return {"schedules": await api_schedules.list_schedules(state, principal, args["table_id"])}
    async with state.db.connection() as conn:
        rows = await sched.list_schedules(conn, workspace_id=principal.workspace_id)
    schema = await state.schema(principal.workspace_id)
    return {"schedules": [api_schedules.schedule_out(r, schema.tables.get(r["table_id"]))
                          for r in rows if principal.can_read(r["table_id"])]}


async def create_schedule(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table = await table_for(state, principal, args["table_id"], Action.UPDATE)
    return await api_schedules.create_schedule(state, principal, table.id,
                                               await _data(state, principal, table.id, args))


async def update_schedule(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table_id, sid = await _table_of(state, principal, args["schedule_id"])
    changes = await _data(state, principal, table_id, args)
    return await api_schedules.update_schedule(state, principal, table_id, sid, changes)


async def delete_schedule(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table_id, sid = await _table_of(state, principal, args["schedule_id"])
    return await api_schedules.delete_schedule(state, principal, table_id, sid)


async def pause_schedule(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table_id, sid = await _table_of(state, principal, args["schedule_id"])
    return await api_schedules.set_paused(state, principal, table_id, sid, bool(args.get("paused", True)))


async def trigger_schedule(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table_id, sid = await _table_of(state, principal, args["schedule_id"])
    return await api_schedules.trigger_schedule(state, principal, table_id, sid)


_SID = {"schedule_id": integer("the schedule's id")}
_WHEN = {
    "cron": string("cron expression (UTC), e.g. \"*/15 * * * *\"; give cron or interval_seconds"),
    "interval_seconds": integer("fire every N seconds instead of cron", minimum=1),
    "columns": array({"type": ID_OR_NAME}, "computed columns to run (default: all)", minItems=1),
    "filters": {"type": ["object", "array"],
                "description": "only records matching {\"Column\": \"op.value\"} or [{column, op, value}]"},
}
_SCHED_OUT = out({"id": {"type": "integer"}, "table_id": {"type": "integer"}, "name": {"type": "string"},
                  "cron": {"type": ["string", "null"]}, "interval_seconds": {"type": ["integer", "null"]},
                  "paused": {"type": "boolean"}, "schedule_id": {"type": "string"}}, ("id",))

SCHEDULE_TOOLS: list[ToolSpec] = [
    builder("list_schedules", "List schedules", "Schedules of the workspace, or of one table.",
            list_schedules, obj({"table_id": TABLE_ID}), out({"schedules": {"type": "array"}}, ("schedules",)),
            read_only=True, idempotent=True),
    builder("create_schedule", "Create a schedule",
            "Run a table's computed columns over its records (or those matching filters) on a cron or an"
            " interval, as a Temporal Schedule; every firing is a run with progress.",
            create_schedule, obj({"table_id": TABLE_ID, "name": string("schedule name"), **_WHEN,
                                  "paused": boolean("create it paused")}, ("table_id", "name")), _SCHED_OUT),
    builder("update_schedule", "Update a schedule",
            "Change a schedule's name, timing (cron or interval_seconds), columns, filters or paused state.",
            update_schedule, obj({**_SID, "name": string("new name"), **_WHEN,
                                  "paused": boolean("pause or resume")}, ("schedule_id",)),
            _SCHED_OUT, idempotent=True),
    builder("delete_schedule", "Delete a schedule", "Delete a schedule; runs already started finish.",
            delete_schedule, obj(_SID, ("schedule_id",)),
            out({"id": {"type": "integer"}, "deleted": {"type": "boolean"}}, ("id", "deleted")),
            destructive=True, idempotent=True),
    builder("pause_schedule", "Pause or resume a schedule", "Pause (default) or resume a schedule.",
            pause_schedule, obj({**_SID, "paused": boolean("true pauses (default), false resumes")},
                                ("schedule_id",)), _SCHED_OUT, idempotent=True),
    builder("trigger_schedule", "Run a schedule now",
            "Fire a schedule once now (even when paused); the run appears in its recent runs.",
            trigger_schedule, obj(_SID, ("schedule_id",)),
            out({"id": {"type": "integer"}, "triggered": {"type": "boolean"}}, ("id", "triggered"))),
]
