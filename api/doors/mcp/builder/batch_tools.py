"""Builder tools for records in bulk: batch create, update by filter, run actions, and
re-running one record's pipeline. Batch create, run-actions, runs and the record's pipeline
are the REST door's operations (:mod:`api.ops.records`, :mod:`api.ops.runs`)."""

from __future__ import annotations

from typing import Any

from api.doors.mcp.builder.common import builder, column_ids, model, positive_id
from api.doors.mcp.spec import (
    FIELDS,
    ID_OR_NAME,
    RECORD_ID,
    TABLE_ID,
    ToolSpec,
    any_object,
    array,
    boolean,
    obj,
    out,
    string,
)
from api.doors.mcp.tools_data import record_ref
from api.ops import records as ops_records
from api.ops import runs as ops_runs
from api.ops.access import table_for
from api.schemas import BatchIn, RunActionsIn, RunIn
from api.state import AppState
from storage.access import Action, Principal

MAX_UPDATE = ops_records.MAX_BATCH


async def batch_create_records(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    body = model(BatchIn, {"rows": args["rows"], "run_pipeline": args.get("run_pipeline", True)})
    done = await ops_records.create_records(state, principal, args["table_id"], body.rows,
                                            run_pipeline=body.run_pipeline)
    return ops_records.plain_results(done)


async def batch_update_records(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """Set the same fields on every record matching the filters (at most 500), in one
    transaction, then run the edit pipeline over them together."""
    return await ops_records.update_matching(state, principal, args["table_id"], args["filters"], args["fields"],
                                             run_pipeline=args.get("run_pipeline", True))


async def run_actions(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table = await table_for(state, principal, args["table_id"], Action.UPDATE)
    body: dict[str, Any] = {}
    if "record_ids" in args:
        body["record_ids"] = [positive_id(r, "record_ids") for r in args["record_ids"]]
    if "filters" in args:
        body["filters"] = args["filters"]
    if args.get("columns"):
        body["column_ids"] = column_ids(table, args["columns"])
    checked = model(RunActionsIn, body)
    return await ops_runs.run_actions(state, principal, table.id, record_ids=checked.record_ids,
                                      filters=checked.filters, column_ids=checked.column_ids)


async def get_run(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    return await ops_runs.get_run(state, principal, str(args["run_id"]))


async def run_record_pipeline(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    body = model(RunIn, {"mode": args.get("mode", "edit"), "changed_columns": args.get("changed_columns", [])})
    return await ops_runs.run_record(state, principal, args["table_id"], record_ref(args["record_id"]),
                                     mode=body.mode, changed_columns=body.changed_columns)


_FILTERS = {"type": ["object", "array"],
            "description": "{\"Column\": \"op.value\"} (REST grammar) or a list of {column, op, value}"}

BATCH_TOOLS: list[ToolSpec] = [
    builder("batch_create_records", "Create records in bulk",
            "Create up to 500 records; one result per row in order (a failing row does not stop the others);"
            " computed columns run over the batch.",
            batch_create_records, obj({
                "table_id": TABLE_ID,
                "rows": array(any_object("{fields: {...}} or a plain object of fields"), "the records",
                              minItems=1),
                "run_pipeline": boolean("run computed columns (default true)"),
            }, ("table_id", "rows")), out({"results": {"type": "array"}}, ("results",))),
    builder("batch_update_records", "Update records by filter",
            "Set the same fields on every record matching the filters (at most 500), then run their pipelines.",
            batch_update_records, obj({"table_id": TABLE_ID, "filters": _FILTERS, "fields": FIELDS,
                                       "run_pipeline": boolean("run computed columns (default true)")},
                                      ("table_id", "filters", "fields")),
            out({"updated": {"type": "integer"}, "ids": {"type": "array"}}, ("updated",)), idempotent=True),
    builder("run_actions", "Run actions in bulk",
            "Run computed columns (all, or the given ones) over record_ids or every record matching filters, in"
            " the background; returns a run id with progress at GET {rest}/runs/<run_id>.",
            run_actions, obj({"table_id": TABLE_ID,
                              "record_ids": array({"type": ID_OR_NAME}, "records to run"),
                              "filters": _FILTERS,
                              "columns": array({"type": ID_OR_NAME}, "computed columns to run (default all)")},
                             ("table_id",)),
            out({"run_id": {"type": "string"}, "status": {"type": "string"}, "total": {"type": "integer"}},
                ("run_id", "status"))),
    builder("get_run", "Show a bulk run",
            "Progress of a bulk run (run_actions, a schedule firing, the backfill a column change started):"
            " status (running, completed, completed_with_errors, superseded, failed), total, done, failed,"
            " and the first 100 failed rows with their errors by column.",
            get_run, obj({"run_id": string("the run id (run_actions or a column's backfill.run_id)")}, ("run_id",)),
            out({"run_id": {"type": "string"}, "status": {"type": "string"}, "total": {"type": "integer"},
                 "done": {"type": "integer"}, "failed": {"type": "integer"}, "failed_rows": {"type": "array"}},
                ("run_id", "status")), read_only=True, idempotent=True),
    builder("run_record_pipeline", "Run a record's pipeline",
            "Re-run one record's computed columns as if changed_columns had changed (mode edit), or all of them"
            " (mode create); returns the record and the pipeline outcome.",
            run_record_pipeline, obj({"table_id": TABLE_ID, "record_id": RECORD_ID,
                                      "mode": string("edit (default) or create", enum=["edit", "create"]),
                                      "changed_columns": array({"type": "string"}, "column names (mode edit)")},
                                     ("table_id", "record_id")),
            out({"record": {"type": "object"}, "pipeline": {"type": "object"}}, ("record",))),
]
