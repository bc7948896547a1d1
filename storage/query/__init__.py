"""The record query compiler: parse → plan → build (STYLE "The query string is a small compiler").

``parse`` turns query parameters into frozen dataclasses and knows nothing of tables;
``plan`` resolves names and types values against table metadata; ``build`` emits SQL with
identifiers and bound parameters only; ``listing`` runs a plan and decodes the rows.

Typical use (REST list)::

    query = parse_params(list(request.query_params.multi_items()))
    plan = plan_query(query, table, can_read=..., get_table=...)
    records, total = await list_records(conn, plan, count=want_count)
"""

from storage.query.build import build_count, build_list, build_where
from storage.query.listing import decode_row, list_page, list_records
from storage.query.parse import (
    DEFAULT_LIMIT,
    MAX_IN_VALUES,
    MAX_LIMIT,
    RESERVED_PARAMS,
    Filter,
    Group,
    Op,
    OrderTerm,
    Query,
    SelectItem,
    filter_items,
    parse_arguments,
    parse_filter,
    parse_filter_list,
    parse_filter_object,
    parse_filters,
    parse_group,
    parse_params,
    parse_record_params,
)
from storage.query.plan import (
    Embed,
    JsonOperand,
    Kind,
    PlannedFilter,
    PlannedGroup,
    PlannedOrder,
    QueryPlan,
    Target,
    plan_filters,
    plan_query,
    resolve_target,
)

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_IN_VALUES",
    "MAX_LIMIT",
    "RESERVED_PARAMS",
    "Embed",
    "Filter",
    "Group",
    "JsonOperand",
    "Kind",
    "Op",
    "OrderTerm",
    "PlannedFilter",
    "PlannedGroup",
    "PlannedOrder",
    "Query",
    "QueryPlan",
    "SelectItem",
    "Target",
    "build_count",
    "build_list",
    "build_where",
    "decode_row",
    "list_page",
    "list_records",
    "filter_items",
    "parse_arguments",
    "parse_filter",
    "parse_filter_list",
    "parse_filter_object",
    "parse_filters",
    "parse_group",
    "parse_params",
    "parse_record_params",
    "plan_filters",
    "plan_query",
    "resolve_target",
]
