"""``GET {rest}/schema``: the whole workspace as the token sees it, in one call."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import RestPrincipal, StateDep
from api.ops.tables import workspace_overview
from api.responses import JSON
from api.schemas import ERRORS

router = APIRouter(prefix="/functions/v1/rest-api", tags=["schema"])


@router.get("/schema", responses=ERRORS)
async def get_schema(principal: RestPrincipal, state: StateDep) -> JSON:
    return JSON(await workspace_overview(state, principal))
