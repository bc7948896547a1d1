"""``POST {rest}/sql``: read-only SQL over the workspace's tables by their human names."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from api.deps import RestPrincipal, StateDep
from api.responses import JSON
from api.routes.tables import ERRORS
from api.state import AppState
from storage.access import Principal
from storage.plans import plan as plan_of
from storage.sqlquery import SqlPlan, run_sql, table_resolver, translate

_PLAN_MEMO = 256  # translated queries kept per workspace schema version

router = APIRouter(prefix="/functions/v1/rest-api", tags=["sql"])


class SqlIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(description="SELECT (* | COUNT(*) | fields) FROM table [WHERE …] [ORDER BY …] [LIMIT n] [OFFSET m]")


class SqlOut(BaseModel):
    rows: list[dict[str, Any]] | None = None
    total: int | None = None
    table: str | None = None
    limit: int | None = None
    offset: int | None = None
    count: int | None = None


async def execute_sql(state: AppState, principal: Principal, query: str, *, json_rows: bool = False) -> dict[str, Any]:
    """Translate and run a read-only query for ``principal`` (shared by REST and MCP).
    ``json_rows``: PostgreSQL renders the page, ``rows`` is an ``orjson.Fragment``."""
    schema = await state.schema(principal.workspace_id)
    # Translation is pure given the text and this schema version; clients repeat their queries.
    plans: dict[str, SqlPlan] = schema.derived.setdefault("sql_plans", {})
    plan = plans.get(query)
    if plan is None or not principal.can_read(plan.table.id):
        plan = translate(query, resolve_table=table_resolver(schema.tables.values()), can_read=principal.can_read)
        if len(plans) >= _PLAN_MEMO:
            plans.clear()
        plans[query] = plan
    async with state.db.connection() as conn:
        return await run_sql(
            conn, plan, workspace_id=principal.workspace_id,
            timeout_s=float(plan_of(principal.plan).sql_timeout_s), json_rows=json_rows,
        )


@router.post("/sql", response_model=SqlOut, responses={**ERRORS, 408: ERRORS[400]})
async def sql(body: SqlIn, principal: RestPrincipal, state: StateDep) -> JSON:
    """Rows are keyed by human names; select values are option ids, as in REST. Runs in a
    READ ONLY transaction as a role that can only read this workspace, within the plan's
    SQL timeout (408 SQL_TIMEOUT)."""
    return JSON(await execute_sql(state, principal, body.query, json_rows=True))
