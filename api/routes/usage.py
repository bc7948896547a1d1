"""``GET {rest}/usage``: the calling token's workspace usage (same shape as the admin API's)."""

from __future__ import annotations

from fastapi import APIRouter, Query

from api import limits
from api.deps import RestPrincipal, StateDep
from api.responses import JSON
from api.schemas import ERRORS
from api.state import AppState
from storage.usage import MAX_DAYS, usage_report

router = APIRouter(prefix="/functions/v1/rest-api", tags=["usage"])


async def workspace_usage(state: AppState, *, workspace_id: int, plan_name: str, days: int) -> JSON:
    """Flush this process's queued usage and counters, then report (read-your-writes here;
    other processes' calls appear within about a second)."""
    rt = limits.runtime(state)
    await limits.flush(state, rt)
    async with state.db.connection() as conn:
        report = await usage_report(
            conn, workspace_id=workspace_id, days=days, plan_name=plan_name, month=rt.quotas.month()
        )
    return JSON(report)


@router.get("/usage", responses=ERRORS)
async def get_usage(
    principal: RestPrincipal,
    state: StateDep,
    days: int = Query(30, ge=1, le=MAX_DAYS, description="how many days back, today included (UTC)"),
) -> JSON:
    """Request counts by day, token, door and status for the last ``days`` days, and this
    month's quota counters against the plan."""
    return await workspace_usage(state, workspace_id=principal.workspace_id, plan_name=principal.plan, days=days)
