"""``POST {rest}/sql``: read-only SQL over the workspace's tables by their human names
(the operation is :func:`api.ops.sql.execute_sql`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Header
from pydantic import BaseModel, ConfigDict, Field

from api.deps import RestPrincipal, StateDep
from api.ops.sql import execute_sql
from api.responses import JSON
from api.schemas import ERRORS

router = APIRouter(prefix="/functions/v1/rest-api", tags=["sql"])


class SqlIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(description="SELECT (* | COUNT(*) | fields) FROM table [WHERE …] [ORDER BY …] [LIMIT n] [OFFSET m],"
                                   " or an analytic SELECT (aggregates, GROUP BY/HAVING, JOIN along a relation,"
                                   " OR, functions: see docs/sql.md)")
    count: bool = Field(False, description="count every matching row for `total` (as the header `Prefer: count=exact`)")


class SqlColumn(BaseModel):
    name: str
    type: str = Field(description="text, number, boolean, date, id, list (a multi-select's labels) or json")


class SqlOut(BaseModel):
    rows: list[dict[str, Any]] | None = Field(None, description="the page, flat rows keyed by human names")
    columns: list[SqlColumn] | None = Field(None, description="an analytic query's result columns, in order")
    total: int | None = Field(None, description="the exact number of matching rows: always when counting, otherwise"
                                                " when this page reaches the end of the result, else null")
    table: str | None = None
    limit: int | None = None
    offset: int | None = None
    has_more: bool | None = Field(None, description="more rows match after this page")
    count: int | None = Field(None, description="the answer to SELECT COUNT(*)")


@router.post("/sql", response_model=SqlOut, responses={**ERRORS, 408: ERRORS[400]})
async def sql(body: SqlIn, principal: RestPrincipal, state: StateDep,
              prefer: str = Header("", description="`count=exact` counts every match for `total`")) -> JSON:
    """Rows are keyed by human names; select values are option ids, as in REST. Runs in a
    READ ONLY transaction as a role that can only read this workspace, within the plan's
    SQL timeout (408 SQL_TIMEOUT).

    `has_more` tells whether more rows match after the page. `total`, the number of
    matching rows, is counted only when asked (`"count": true` or `Prefer: count=exact`,
    as for record lists): a count reads every match. Without it, `total` is still exact
    when the page reaches the end of the result, and `null` otherwise."""
    return JSON(await execute_sql(state, principal, body.query, json_rows=True,
                                  count=body.count or "count=exact" in prefer))
