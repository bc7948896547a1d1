"""EXPLAIN of the list statement the API sends for a query string (storage tests)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from storage import meta
from storage.query import parse_params, plan_query
from storage.query.render import prepare_list_json


def plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan, depth first."""
    out = [node]
    for child in node.get("Plans", []):
        out.extend(plan_nodes(child))
    return out


async def explain_list(dsn: str, ws_id: int, table_id: int, params: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The plan nodes of the page statement the REST list sends for ``params``."""
    async with await psycopg.AsyncConnection.connect(dsn, row_factory=dict_row, autocommit=True) as conn:
        schema = await meta.load_schema(conn, workspace_id=ws_id)
        table = schema.tables[table_id]
        plan = plan_query(parse_params(params), table, can_read=lambda _: True, get_table=schema.tables.get)
        prepared = prepare_list_json(plan)  # the statement the API sends for this list
        query = psycopg.AsyncClientCursor(conn).mogrify(prepared.page_sql, prepared.page_params)
        row = await (await conn.execute("EXPLAIN (FORMAT JSON) " + query)).fetchone()
        assert row is not None
        return plan_nodes(row["QUERY PLAN"][0]["Plan"])
