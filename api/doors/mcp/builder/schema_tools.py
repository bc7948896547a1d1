"""Builder tools for tables and columns: thin adapters over :mod:`api.ops.tables` and
:mod:`api.ops.columns`, the operations REST calls too, so a table made over MCP is made
exactly as over REST (validation, DDL, cache invalidation)."""

from __future__ import annotations

from typing import Any

from api.doors.mcp.builder.common import builder, model, pick
from api.doors.mcp.spec import (
    DELETED_OUT,
    ID_OR_NAME,
    TABLE_ID,
    ToolSpec,
    any_object,
    array,
    boolean,
    integer,
    obj,
    out,
    string,
)
from api.ops import columns as column_ops
from api.ops import tables as table_ops
from api.ops.access import table_for
from api.schemas import ColumnIn, ColumnPatch, TableIn, TablePatch
from api.state import AppState
from storage.access import Action, Principal
from storage.errors import ValidationError

_COLUMN_FIELDS = ("name", "type", "required", "options", "formula", "config", "relation_table_id",
                  "relation_source_column_id", "position", "backfill")


def column_props(for_patch: bool = False) -> dict[str, dict[str, Any]]:
    return {
        "name": string("column name, unique in the table"),
        "type": string("a column type (see check_column_types): text, number, date, checkbox, single_select,"
                       " multi_select, relation, file, formula, http_request, json_parser, ..."),
        "required": boolean("enforced when records are created"),
        "options": array({"type": ["string", "object"]},
                         "select options: labels, or {id?, label, color?} (colors: red, orange, amber, green,"
                         " teal, blue, indigo, purple, pink, gray)" + (" — the full new list" if for_patch else "")),
        "formula": string("formula columns: the expression, e.g. CONCAT({First}, \" \", {Last})"),
        "config": any_object("computed columns: the kind's settings (see check_column_types)"),
        "relation_table_id": integer("relation columns: the related table's id"),
        "relation_source_column_id": integer("relation columns: the related table's label column id"),
        "position": integer("0-based place among the columns", minimum=0),
        "backfill": boolean("recompute existing rows (default: formula, json_parser and fetch_records columns and"
                            " their dependants yes; kinds with side effects such as http_request only when true;"
                            " false: none). The answer's backfill {run_id, total} tracks it at GET {rest}/runs/<id>"),
    }


_SEMANTIC = obj({"columns": array({"type": "string"}, "text columns to embed")}, ("columns",),
                description="enable semantic search over these columns (null disables)")
_COLUMN = {"type": ID_OR_NAME, "description": "the column's id or name"}
_TABLE_OUT = out({"id": {"type": "integer"}, "name": {"type": "string"}, "columns": {"type": "array"}},
                 ("id", "name", "columns"))
_COLUMN_OUT = out({"id": {"type": "integer"}, "name": {"type": "string"}, "type": {"type": "string"}},
                  ("id", "name", "type"))


_FORCE = {"type": "boolean", "default": False,
          "description": "delete even though other columns, views or settings use it (they are loosened or marked broken)"}


async def create_table(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    body = model(TableIn, pick(args, "name", "icon", "columns", "semantic_search"))
    return await table_ops.create_table(state, principal, body)


async def update_table(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table = await table_for(state, principal, args["table_id"], Action.READ)
    changes = pick(args, "name", "icon", "semantic_search")
    if not changes:
        raise ValidationError("nothing to change: send name, icon or semantic_search")
    return await table_ops.update_table(state, principal, table.id, model(TablePatch, changes))


def _force(args: dict[str, Any]) -> bool:
    force = args.get("force", False)
    if not isinstance(force, bool):
        raise ValidationError("force must be a boolean")
    return force


async def delete_table(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table = await table_for(state, principal, args["table_id"], Action.READ)
    return await table_ops.delete_table(state, principal, table.id, force=_force(args))


async def get_table(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table = await table_for(state, principal, args["table_id"], Action.READ)
    return {**await table_ops.get_table(state, principal, table.id), "access": principal.perms(table.id).as_dict()}


async def create_column(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table = await table_for(state, principal, args["table_id"], Action.READ)
    body = model(ColumnIn, pick(args, *_COLUMN_FIELDS))
    return await column_ops.create_column(state, principal, table.id, body)


async def update_column(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table = await table_for(state, principal, args["table_id"], Action.READ)
    body = model(ColumnPatch, pick(args, *_COLUMN_FIELDS, "allow_loss"))
    column = column_ops.column_ref(table, args["column"])
    return await column_ops.update_column(state, principal, table.id, column.id, body)


async def delete_column(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table = await table_for(state, principal, args["table_id"], Action.READ)
    force = _force(args)
    column = column_ops.column_ref(table, args["column"])
    return await column_ops.delete_column(state, principal, table.id, column.id, force=force)


async def reorder_columns(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """Listed columns first, in the given order; the others keep their relative order after."""
    table = await table_for(state, principal, args["table_id"], Action.READ)
    return await column_ops.reorder_columns(state, principal, table.id, args["columns"])


SCHEMA_TOOLS: list[ToolSpec] = [
    builder("create_table", "Create a table",
            "Create a table with its columns (each {name, type, required?, options?, formula?, config?}).",
            create_table, obj({
                "name": string("table name, unique in the workspace"), "icon": string("icon name"),
                "columns": array(obj(column_props(), ("name",)), "the columns to create"),
                "semantic_search": _SEMANTIC,
            }, ("name",)), _TABLE_OUT),
    builder("update_table", "Update a table", "Rename a table, change its icon or its semantic-search columns.",
            update_table, obj({"table_id": TABLE_ID, "name": string("new name"), "icon": string("new icon"),
                               "semantic_search": {**_SEMANTIC, "type": ["object", "null"]}}, ("table_id",)),
            _TABLE_OUT, idempotent=True),
    builder("delete_table", "Delete a table",
            "Drop a table and all its records (irreversible). Refused with COLUMN_IN_USE (listing `dependents`)"
            " while relation or record-step columns of other tables point at it (with what uses those"
            " relations); force: true drops it anyway (the relations go with it, computed columns that used"
            " them or the table are marked broken; `detached` lists them).",
            delete_table, obj({"table_id": TABLE_ID, "force": _FORCE},
                              ("table_id",)), DELETED_OUT, destructive=True, idempotent=True),
    builder("get_table", "Get a table", "A table with all its columns and settings.",
            get_table, obj({"table_id": TABLE_ID}, ("table_id",)), _TABLE_OUT, read_only=True, idempotent=True),
    builder("create_column", "Create a column", "Add a data or computed column to a table.",
            create_column, obj({"table_id": TABLE_ID, **column_props()}, ("table_id", "name", "type")), _COLUMN_OUT),
    builder("update_column", "Update a column",
            "Rename a column or change its type, options, formula, config or required flag. A type"
            " change converts the values (see docs/type-conversions.md).",
            update_column, obj({"table_id": TABLE_ID, "column": _COLUMN, **column_props(True),
                               "allow_loss": boolean("go ahead with a change that drops values it cannot"
                                                     " convert (refused with LOSSY_CHANGE otherwise)")},
                               ("table_id", "column")), _COLUMN_OUT, idempotent=True),
    builder("delete_column", "Delete a column",
            "Remove a column and its values. Refused with COLUMN_IN_USE (listing `dependents`: computed columns,"
            " views, relation labels, semantic search, schedules) while anything uses it; force: true deletes it"
            " anyway (views lose those terms, dependent computed columns are marked broken until edited).",
            delete_column, obj({"table_id": TABLE_ID, "column": _COLUMN, "force": _FORCE},
                               ("table_id", "column")), DELETED_OUT, destructive=True, idempotent=True),
    builder("reorder_columns", "Reorder columns",
            "Put the listed columns first, in this order; unlisted columns follow in their current order.",
            reorder_columns, obj({"table_id": TABLE_ID,
                                  "columns": array({"type": ID_OR_NAME}, "column ids or names", minItems=1)},
                                 ("table_id", "columns")),
            out({"table_id": {"type": "integer"}, "columns": {"type": "array"}}, ("columns",)), idempotent=True),
]
