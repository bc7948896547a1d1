"""Read-only SQL over the workspace's tables by their human names, for every door (REST
``POST {rest}/sql`` and its fast path, the MCP ``sql_query`` tool, the agent chat)."""

from __future__ import annotations

from typing import Any

from api.state import AppState
from storage.access import Principal
from storage.plans import plan as plan_of
from storage.sqlquery import AnalyticPlan, SqlPlan, run_sql, table_resolver, translate

_PLAN_MEMO = 256  # translated queries kept per workspace schema version


async def execute_sql(
    state: AppState, principal: Principal, query: str, *, json_rows: bool = False, count: bool = False,
) -> dict[str, Any]:
    """Translate and run a read-only query for ``principal``.

    ``json_rows``: PostgreSQL renders the page, ``rows`` is an ``orjson.Fragment`` (for a
    door that writes the answer as JSON at once). ``count``: count every match for
    ``total`` (see :func:`storage.sqlquery.run_sql`).

    Raises:
        ServiceError: the query's translation errors (400), ``SQL_TIMEOUT`` (408),
            ``RESULT_TOO_LARGE`` (400: the page would pass ``WDS_SQL_MAX_ANSWER_BYTES``).
    """
    schema = await state.schema(principal.workspace_id)
    # Translation is pure given the text and this schema version; clients repeat their queries.
    plans: dict[str, SqlPlan | AnalyticPlan] = schema.derived.setdefault("sql_plans", {})
    plan = plans.get(query)
    if plan is None or not all(principal.can_read(t) for t in plan.table_ids):
        plan = translate(query, resolve_table=table_resolver(schema.tables.values()), can_read=principal.can_read,
                         max_bytes=state.settings.sql_max_answer_bytes)
        if len(plans) >= _PLAN_MEMO:
            plans.clear()
        plans[query] = plan
    async with state.db.connection() as conn:
        return await run_sql(
            conn, plan, workspace_id=principal.workspace_id,
            timeout_s=float(plan_of(principal.plan).sql_timeout_s), json_rows=json_rows, count=count,
        )
