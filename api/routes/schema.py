"""``GET {rest}/schema``: the whole workspace as the token sees it, in one call."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.deps import RestPrincipal, StateDep
from api.responses import JSON
from api.schemas import ERRORS
from api.serialize import table_out
from api.state import AppState
from storage.access import Principal
from storage.agents import agent_out, list_agents

router = APIRouter(prefix="/functions/v1/rest-api", tags=["schema"])


async def workspace_overview(state: AppState, principal: Principal) -> dict[str, Any]:
    """Tables with columns and the token's access, plus agents and their public channels.

    Three queries whatever the size of the workspace: the cached schema (two) and one
    for agents with their channels.
    """
    schema = await state.schema(principal.workspace_id)
    tables = []
    for table in schema.tables.values():
        perms = principal.perms(table.id)
        if not perms.read:
            continue
        tables.append({**table_out(table), "access": perms.as_dict()})
    async with state.db.connection() as conn:
        agents = [agent_out(r) for r in await list_agents(conn, workspace_id=principal.workspace_id)]
    return {"workspace_id": principal.workspace_id, "tables": tables, "agents": agents}


@router.get("/schema", responses=ERRORS)
async def get_schema(principal: RestPrincipal, state: StateDep) -> JSON:
    return JSON(await workspace_overview(state, principal))
