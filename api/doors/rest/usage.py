"""``GET {rest}/usage``: the calling token's workspace usage (same shape as the admin API's)."""

from __future__ import annotations

from fastapi import APIRouter, Query

from api.deps import RestPrincipal, StateDep
from api.ops.usage import workspace_usage
from api.responses import JSON
from api.schemas import ERRORS
from storage.usage import MAX_DAYS

router = APIRouter(prefix="/functions/v1/rest-api", tags=["usage"])


@router.get("/usage", responses=ERRORS)
async def get_usage(
    principal: RestPrincipal,
    state: StateDep,
    days: int = Query(30, ge=1, le=MAX_DAYS, description="how many days back, today included (UTC)"),
) -> JSON:
    """Request counts by day, token, door and status for the last ``days`` days, and this
    month's quota counters against the plan."""
    return JSON(await workspace_usage(state, workspace_id=principal.workspace_id, plan_name=principal.plan,
                                      days=days))
