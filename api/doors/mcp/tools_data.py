"""The 12 data tools every MCP token gets (spec "MCP server"), as plain async functions.

Each handler is ``async (state, principal, args) -> dict``: it reads the tool's arguments
and calls the operation the REST door calls (:mod:`api.ops`), so pipelines, required
columns, grants and query errors behave identically. Nothing here imports the MCP SDK:
the agent chat serves these same specs as its tools.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from api.doors.mcp.spec import (
    DELETED_OUT,
    FIELDS,
    ID_OR_NAME,
    RECORD_ID,
    RECORD_OUT,
    TABLE_ID,
    JsonValues,
    ToolSpec,
    any_object,
    array,
    boolean,
    integer,
    jsonable,
    obj,
    out,
    string,
)
from api.ops import records as ops_records
from api.ops import runs as ops_runs
from api.ops import search as ops_search
from api.ops import views as ops_views
from api.ops.access import table_for
from api.ops.catalogue import INTEGRATION_SOURCES
from api.ops.sql import execute_sql
from api.serialize import column_out, table_summary
from api.state import AppState
from storage import jsontext
from storage.access import Action, Principal
from storage.errors import ServiceError
from storage.formula.functions import describe_functions
from storage.query import DEFAULT_LIMIT, MAX_LIMIT, Query, parse_arguments
from storage.query.listing import CountMode, count_mode
from storage.query.parse import terms_text
from storage.schema import COMPUTED_TYPES, DATA_TYPES
from storage.sqlquery.parse import MAX_QUERY_CHARS

MCP_DEFAULT_LIMIT = DEFAULT_LIMIT  # pages as REST does (spec "Limits": default 100, at most 1000)
MCP_MAX_LIMIT = MAX_LIMIT

_DATA_DOCS = {
    "text": "free text", "number": "a number (integer or decimal)",
    "date": "an instant; date-only input means midnight UTC", "checkbox": "true/false",
    "single_select": "one option id (write the label or the id)",
    "multi_select": "a list of option ids", "relation": "the id of a record in relation_table",
    "file": "a list of files ({bucket, path} or external URLs); read back as URLs",
}
_COMPUTED_DOCS = {
    "formula": ("Excel-like formula over {Column} references, or JavaScript",
                "formula (top-level); config.language: excel (default) or javascript"),
    "http_request": ("HTTP call through the platform proxy; the cell holds the response body",
                     "{method, url, headers, body, credential?, timeout_s?}"),
    "action": ("an integration request from the special-fields catalogue",
               "{group_id, request_id, params, credential?, timeout_s?}"),
    "json_parser": ("extract from another column's JSON with JMESPath", "{source_column, path}"),
    "ai_agent": ("LLM completion over a Jinja2 prompt",
                 "{prompt, system?, model?, output: text|json, timeout_s?}"),
    "create_record": ("create a record in another table", "{table_id, fields}"),
    "update_record": ("update a record of another table", "{table_id, record_id, fields}"),
    "delete_record": ("delete a record of another table", "{table_id, record_id}"),
    "fetch_records": ("fetch matching records of another table", "{table_id, filters, limit?}"),
    "loop": ("run a sub-step for each item of a list column", "{source_column, step: {type, config}}"),
    "delay": ("a durable timer before dependants run", "{seconds}"),
}


def record_ref(value: Any) -> str:
    """A record id argument as the REST path segment (REST answers 404 for non-ids)."""
    return str(value).strip()


# --------------------------------------------------------------------------- handlers


async def check_column_types(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    integrations: list[dict[str, Any]] = []
    for source in INTEGRATION_SOURCES:
        integrations.extend(await source(state, principal))
    return {
        "data_types": [{"type": t, "description": d} for t, d in _DATA_DOCS.items() if t in DATA_TYPES],
        "computed_types": [{"type": t, "description": d, "config": c}
                           for t, (d, c) in _COMPUTED_DOCS.items() if t in COMPUTED_TYPES],
        "integrations": integrations,
        "formula_functions": describe_functions(),
    }


async def list_tables(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    schema = await state.schema(principal.workspace_id)
    tables = [{**table_summary(t), "columns": len(t.columns), "access": principal.perms(t.id).as_dict()}
              for t in schema.tables.values() if principal.can_read(t.id)]
    return {"tables": tables}


async def list_columns(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table = await table_for(state, principal, args["table_id"], Action.READ)
    return {"table": {"id": table.id, "name": table.name}, "columns": [column_out(c) for c in table.columns]}


def _query(args: dict[str, Any]) -> Query:
    """The arguments as the one query model (:func:`storage.query.parse_arguments`):
    the REST door's grammar, defaults, limits and error messages."""
    query = parse_arguments({k: args.get(k) for k in _LIST_KEYS})
    # Query.count: the exact total (planned/estimated read the page with one record more)
    query = dataclasses.replace(query, count=count_mode(args.get("count")) is CountMode.EXACT)
    if query.limit > MAX_LIMIT:
        raise ServiceError(f"limit may be at most {MAX_LIMIT}", code="LIMIT_TOO_LARGE")
    return query


_LIST_KEYS = ("filters", "order", "select", "expand", "limit", "offset", "count", "view", "after")


async def list_records_tool(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """One page with ``limit``, ``offset`` and ``has_more``; the exact ``total`` only when
    ``count`` is true (as REST counts only on ``Prefer: count=exact``: a count reads every
    match, which on a large table costs far more than the page). Without it the page is
    read with one record more than asked, which tells whether more match."""
    # the statements are memoised per table and arguments for this schema version; a
    # view's filters are read from the database and each cursor is another statement
    memoise = args.get("view") is None and args.get("after") is None
    # jsontext: an integer past 64 bits (an absurd offset or view id) is a key too, refused below
    req = ops_records.ListRequest(("mcp", jsontext.dumps([args.get(k) for k in _LIST_KEYS])),
                                  lambda: _query(args), memoise=memoise, probe_empty=True)
    mode = count_mode(args.get("count"))
    counting = mode is CountMode.EXACT
    found = await ops_records.list_records(state, principal, args["table_id"], req, count=mode)
    raw = isinstance(found.records, ops_records.RawJson)
    records: list[dict[str, Any]] = found.records.value() if raw else found.records  # type: ignore[union-attr,assignment]
    total, after, offset, limit = found.total, found.next, found.offset, found.limit
    matched_any = None
    if _query(args).limit == 0:  # planned as 1 (probe_empty): the record only says whether any matches
        limit, after, matched_any, records = 0, None, bool(records), []
    page: dict[str, Any] = {"records": records, "limit": limit, "offset": offset, "next": after}
    if raw:
        # parsed from PostgreSQL's JSON, so JSON values only: the fast path writes it itself
        # (a page decoded in Python may hold other types, e.g. a computed column's datetime)
        page = JsonValues(page)
    matching = total or 0  # the exact total, when counting
    if counting:
        page["total"] = matching
    elif mode is not None:  # planned or estimated: the figure as REST's headers give it
        page["total"] = total or 0
    # the page reads one record past it: a next cursor means more match
    more = after is not None or bool(matched_any)
    end = offset + len(records)
    page["has_more"] = more
    if more:
        left = f"{matching - end} more record(s) match" if counting and args.get("after") is None else "more records match"
        # offset only when this page came by offset: a cursor page's position is not known
        by_offset = "" if args.get("after") is not None else f" (or offset={end})"
        page["hint"] = (f"{left}; call list_records again with after=<this page's next>{by_offset}"
                        " to continue, or narrow the result with filters or select")
    elif not records and offset:
        page["hint"] = (f"offset {offset} is past the last of {matching} matching record(s)" if matching
                        else f"offset {offset} is past the last matching record")
    return page


async def get_record(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    params: list[tuple[str, str]] = []
    for key in ("select", "expand"):
        terms = terms_text(key, args.get(key))
        if terms is not None:
            params.append((key, terms))
    return await ops_records.get_record(state, principal, args["table_id"], record_ref(args["record_id"]), params)


async def create_record(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    return await ops_records.create_record(state, principal, args["table_id"], args["fields"],
                                           run_pipeline=args.get("run_pipeline", True))


async def update_record(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    return await ops_records.update_record(state, principal, args["table_id"], record_ref(args["record_id"]),
                                           args["fields"], run_pipeline=args.get("run_pipeline", True))


async def delete_record(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    return await ops_records.delete_record(state, principal, args["table_id"], record_ref(args["record_id"]))


async def compute_cell(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    return await ops_runs.compute_cell(state, principal, args["table_id"], record_ref(args["record_id"]),
                                       str(args["column"]))


async def list_views(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    listed = await ops_views.list_views_published(state, principal, args["table_id"])
    return {"table": listed["table"], "views": jsonable(listed["views"])}


async def semantic_search(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    return await ops_search.search_records(state, principal, args["table_id"], args["query"],
                                           limit=args.get("limit", 10), filters=args.get("filters"))


async def sql_query(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    return await execute_sql(state, principal, args["query"], count=bool(args.get("count", False)))


# --------------------------------------------------------------------------- specs

# Teaches the grammar by example: AI tools write their queries from this text alone.
_SQL_DESCRIPTION = """Read-only SQL over the workspace's tables, by their human names (double-quote names \
with spaces: "Due Date"). Runs read-only, only over tables this token may read, within the plan's SQL timeout.

Simple form: SELECT (* | COUNT(*) | col, ...) FROM "Table" [WHERE cond AND ...] [ORDER BY col [ASC|DESC]] \
[LIMIT n] [OFFSET m] -> {rows, total, table, limit, offset, has_more} or {count}; select columns give option ids.

Analytics: aggregates COUNT(*), COUNT(col), COUNT(DISTINCT col), SUM, AVG, MIN, MAX (also FILTER (WHERE ...)); \
GROUP BY (columns, expressions or positions) and HAVING; AND/OR/NOT and parentheses; BETWEEN, [NOT] LIKE, ILIKE, \
[NOT] IN (...), IS [NOT] NULL; + - * / %; CASE WHEN; AS aliases; DISTINCT; functions lower, upper, length, trim, \
coalesce, nullif, round(x[, n]), abs, date_trunc('month', col), extract(year FROM col), now(), current_date, \
INTERVAL '30 days', label(relation_col) (the related record's label); JOIN / LEFT JOIN of tables linked by a \
relation column (ON "Deals"."Company" = "Companies".id, or just JOIN "Companies"); col IN (SELECT one_col FROM ...). These answer {rows, columns: \
[{name, type}], total, limit, offset, has_more}; there select columns read their labels, a relation the related \
record's id, and dates stay ISO timestamps. LIMIT defaults to 100, at most 1000; total is exact when count is \
true or the page reaches the end, else null.

Examples:
SELECT "Stage", SUM("Amount") AS revenue FROM "Deals" WHERE "Closed" >= date_trunc('quarter', now()) \
GROUP BY "Stage" ORDER BY revenue DESC
SELECT c."Name", COUNT(*) AS open_deals FROM "Deals" d JOIN "Companies" c ON d."Company" = c.id \
WHERE d."Stage" = 'Open' GROUP BY c."Name" HAVING COUNT(*) > 3
SELECT date_trunc('month', "Closed") AS month, COUNT(*) FROM "Deals" GROUP BY 1 ORDER BY 1
SELECT "Name" FROM "Companies" WHERE id IN (SELECT "Company" FROM "Deals" WHERE "Amount" > 1000)
SELECT "Title" FROM "Tasks" WHERE "Status" = 'Done' OR ("Due" < now() AND NOT "Done")"""


_FILTERS = {
    "type": ["object", "array"],
    "description": "filters ANDed together, REST grammar: {\"Column\": \"op.value\"} with op one of eq, neq, gt,"
                   " gte, lt, lte, like, ilike (* wildcard), in.(a,b), cs.{a,b}, is.null|true|false, and"
                   " not.<op>; a list value means in; null means is.null; the keys or / and / not.or /"
                   " not.and hold a group as REST writes it, e.g. {\"or\": \"(Score.gte.10,and(Status.eq.done,"
                   "Title.ilike.*x*))\"}; or a list of {column, op, value} (and {\"or\": \"(...)\"}) items"
                   " for several conditions on one column",
}
_TERMS = {"type": ["string", "array"], "items": {"type": "string"}}
_SELECT = {**_TERMS, "description": "fields to return, \"A,B\" or [\"A\", \"B\"]; embed a relation as"
                                    " \"Rel(Name,Email)\"; empty: no field (id and timestamps only)"}
_EXPAND = {**_TERMS, "description": "relation column(s) to embed whole, \"Rel\" or [\"Rel1\", \"Rel2\"]"}
# limit and offset carry no JSON-schema type: the query parser checks them, with the
# messages REST gives (an integral number such as 10.0 is ten)
_PAGE_OUT = out({
    "records": {"type": "array", "items": {"type": "object"}},
    "limit": {"type": "integer"}, "offset": {"type": "integer"}, "total": {"type": "integer"},
    "has_more": {"type": "boolean"}, "hint": {"type": "string"},
    "next": {"type": ["string", "null"]},
}, ("records", "limit", "offset", "has_more"))
_TABLE_ONLY = obj({"table_id": TABLE_ID}, ("table_id",))
_REC = {"table_id": TABLE_ID, "record_id": RECORD_ID}
_RUN = boolean("run the table's computed columns before answering (default true)")


def _spec(name: str, title: str, description: str, handler: Any, input_schema: dict[str, Any],
          output_schema: dict[str, Any] | None, **hints: bool) -> ToolSpec:
    return ToolSpec(name=name, title=title, description=description, input_schema=input_schema,
                    output_schema=output_schema, handler=handler, door="data", **hints)


DATA_TOOLS: list[ToolSpec] = [
    _spec("check_column_types", "Column types",
          "The column types a table can have: data types, computed types with their config shapes,"
          " installed integrations, and the formula functions.",
          check_column_types, obj({}), out({"data_types": {"type": "array"}, "computed_types": {"type": "array"},
                                            "integrations": {"type": "array"},
                                            "formula_functions": {"type": "array"}}),
          read_only=True, idempotent=True),
    _spec("list_tables", "List tables",
          "Tables this token can read, with their column count and this token's access.",
          list_tables, obj({}), out({"tables": {"type": "array", "items": {"type": "object"}}}, ("tables",)),
          read_only=True, idempotent=True),
    _spec("list_columns", "List columns",
          "A table's columns: name, type, required, options (select), formula/config (computed).",
          list_columns, _TABLE_ONLY, out({"table": {"type": "object"}, "columns": {"type": "array"}},
                                         ("columns",)),
          read_only=True, idempotent=True),
    _spec("list_records", "List records",
          f"One page of a table's records with filters, order, select, expand or a saved view, as the REST"
          f" list reads them. Returns has_more and next (pass it as after for the next page; null on the"
          f" last), and the"
          f" exact total of matching records with count: true, an estimate with \"planned\" or"
          f" \"estimated\");"
          f" default {MCP_DEFAULT_LIMIT} records per page, at most {MCP_MAX_LIMIT}.",
          list_records_tool, obj({
              "table_id": TABLE_ID, "filters": _FILTERS,
              "order": {"type": ["string", "array"], "items": {"type": "string"},
                        "description": "\"Col.asc,Col2.desc\" (or a list of terms); any column incl. id,"
                                       " created_at, updated_at"},
              "limit": {"description": f"page size, a non-negative integer: default {MCP_DEFAULT_LIMIT},"
                                       f" at most {MCP_MAX_LIMIT}"},
              "offset": {"description": "records to skip, a non-negative integer (not with after)"},
              "after": {"type": "string", "description": "the previous page's next: the page after it"
                                                         " (same filters and order; deep pages cost no more)"},
              "count": {"type": ["boolean", "string"], "enum": [True, False, "exact", "planned", "estimated"],
                        "description": "also return total: true or \"exact\" counts every match (reads"
                                       " every match); \"planned\" is the planner's estimate (reads none);"
                                       " \"estimated\" is exact below 100,000 estimated matches, planned"
                                       " above; default false"},
              "select": _SELECT, "expand": _EXPAND,
              "view": {"type": ["string", "integer"], "description": "a saved view's id (list_views): its"
                       " filters AND these; order replaces its sort"},
          }, ("table_id",)), _PAGE_OUT, read_only=True, idempotent=True),
    _spec("get_record", "Get a record",
          "One record by id, with its last pipeline outcome; with select or expand shaped as list_records"
          " shapes it.",
          get_record, obj({**_REC, "select": _SELECT, "expand": _EXPAND}, ("table_id", "record_id")),
          RECORD_OUT, read_only=True, idempotent=True),
    _spec("create_record", "Create a record",
          "Create a record; required columns are enforced and computed columns run before the answer"
          " (their values and pipeline.errors are in the result).",
          create_record, obj({"table_id": TABLE_ID, "fields": FIELDS, "run_pipeline": _RUN},
                             ("table_id", "fields")), RECORD_OUT),
    _spec("update_record", "Update a record",
          "Change only the given fields of a record; computed columns depending on them re-run.",
          update_record, obj({**_REC, "fields": FIELDS, "run_pipeline": _RUN}, ("table_id", "record_id", "fields")),
          RECORD_OUT, idempotent=True),
    _spec("delete_record", "Delete a record", "Delete a record permanently.",
          delete_record, obj(_REC, ("table_id", "record_id")), DELETED_OUT, destructive=True, idempotent=True),
    _spec("compute_cell", "Compute a cell",
          "Re-run exactly one computed column of one record and return its new value; nothing else runs.",
          compute_cell, obj({**_REC, "column": {"type": ID_OR_NAME, "description": "the computed column's name"}},
                            ("table_id", "record_id", "column")),
          out({"record_id": {"type": "integer"}, "column": {"type": "string"}, "value": {},
               "pipeline": {"type": "object"}}, ("record_id", "column"))),
    _spec("list_views", "List views", "A table's saved views (grid, kanban, form, ...) with their config.",
          list_views, _TABLE_ONLY, out({"table": {"type": "object"}, "views": {"type": "array"}}, ("views",)),
          read_only=True, idempotent=True),
    _spec("semantic_search", "Semantic search",
          "Records closest in meaning to a query, for tables with semantic search enabled.",
          semantic_search, obj({"table_id": TABLE_ID, "query": string("what to look for, in plain words"),
                                "limit": integer("results, default 10", minimum=1, maximum=100),
                                "filters": _FILTERS}, ("table_id", "query")),
          out({"results": array(any_object("{record, score}"), "best first")}, ("results",)),
          read_only=True, idempotent=True),
    _spec("sql_query", "Read-only SQL", _SQL_DESCRIPTION,
          sql_query, obj({"query": string("one SELECT statement, with the tables' and columns' human names",
                                          maxLength=MAX_QUERY_CHARS),
                          "count": boolean("also count every result row for total (reads every"
                                           " match; default false)")},
                         ("query",)),
          out({"rows": {"type": "array"}, "total": {"type": ["integer", "null"]}, "table": {"type": "string"},
               "columns": array(any_object("{name, type}"), "an analytic query's result columns, in order"),
               "limit": {"type": ["integer", "null"]}, "offset": {"type": ["integer", "null"]},
               "has_more": {"type": "boolean"}, "count": {"type": "integer"}}),
          read_only=True, idempotent=True),
]
