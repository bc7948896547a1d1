"""AI agents and their chat channels (``{rest}/agents``).

Any REST token may list agents (the spec's "AI agents with their web channel tokens");
creating, editing and deleting agents and channels is for the workspace's builder
credential (vibe_mcp) only, as for the builder MCP tools (DESIGN §4). Which channel
tokens a listing shows is decided in :mod:`storage.agents`: web tokens (public by
design) always, messaging tokens only in the response that creates the channel.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from api.deps import RestPrincipal, StateDep, require_writable
from api.responses import JSON
from api.routes.tables import ERRORS
from api.schemas import Deleted
from api.state import AppState
from storage import agents
from storage.access import Principal, TokenType
from storage.errors import Forbidden, NotFound

router = APIRouter(prefix="/functions/v1/rest-api/agents", tags=["agents"])


class AgentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    instructions: str = ""
    model: str | None = Field(None, description="chat model; null uses the deployment's default")
    table_ids: list[int] = Field(default_factory=list, description="tables of the workspace the agent may use")


class AgentPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    instructions: str | None = None
    model: str | None = None
    table_ids: list[int] | None = None


class ChannelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: str = Field(description="web, telegram, slack or whatsapp")


class ChannelOut(BaseModel):
    id: int
    type: str
    token: str | None = Field(None, description="web channels always; other types only when created")
    enabled: bool


class AgentOut(BaseModel):
    id: int
    name: str
    instructions: str
    model: str | None
    table_ids: list[int]
    channels: list[ChannelOut]
    created_at: str
    updated_at: str


def require_builder(principal: Principal) -> None:
    """Managing agents is for the builder credential (vibe_mcp) only."""
    if principal.type is not TokenType.VIBE_MCP:
        raise Forbidden("managing agents and channels needs the workspace's builder token")
    require_writable(principal)


async def _table_ids(state: AppState, principal: Principal) -> set[int]:
    return set((await state.schema(principal.workspace_id)).tables)


def _agent_id(agent_id: str) -> int:
    if not (agent_id.isascii() and agent_id.isdigit()) or len(agent_id) > 18:
        raise NotFound(f"agent {agent_id} not found")
    return int(agent_id)


@router.get("", response_model=list[AgentOut], responses=ERRORS)
async def list_agents(principal: RestPrincipal, state: StateDep) -> JSON:
    """AI agents of the workspace with their channels (web channel tokens included)."""
    async with state.db.connection() as conn:
        rows = await agents.list_agents(conn, workspace_id=principal.workspace_id)
    return JSON([agents.agent_out(r) for r in rows])


@router.get("/{agent_id}", response_model=AgentOut, responses=ERRORS)
async def get_agent(agent_id: str, principal: RestPrincipal, state: StateDep) -> JSON:
    async with state.db.connection() as conn:
        row = await agents.get_agent(conn, workspace_id=principal.workspace_id, agent_id=_agent_id(agent_id))
    if row is None:
        raise NotFound(f"agent {agent_id} not found")
    return JSON(agents.agent_out(row))


@router.post("", status_code=201, response_model=AgentOut, responses=ERRORS)
async def create_agent(body: AgentIn, principal: RestPrincipal, state: StateDep) -> JSON:
    """Create an agent (builder token only); `table_ids` must be tables of the workspace."""
    require_builder(principal)
    fields = agents.clean_agent_fields(
        body.model_dump(), workspace_table_ids=await _table_ids(state, principal), creating=True
    )
    async with state.db.connection() as conn:
        row = await agents.create_agent(conn, workspace_id=principal.workspace_id, **fields)
    return JSON(agents.agent_out(row), status_code=201)


@router.patch("/{agent_id}", response_model=AgentOut, responses=ERRORS)
async def patch_agent(agent_id: str, body: AgentPatch, principal: RestPrincipal, state: StateDep) -> JSON:
    """Change only the sent fields (builder token only); `table_ids` replaces the list."""
    require_builder(principal)
    fields = agents.clean_agent_fields(
        body.model_dump(exclude_unset=True), workspace_table_ids=await _table_ids(state, principal), creating=False
    )
    async with state.db.connection() as conn:
        row = await agents.update_agent(
            conn, workspace_id=principal.workspace_id, agent_id=_agent_id(agent_id), changes=fields
        )
    if row is None:
        raise NotFound(f"agent {agent_id} not found")
    return JSON(agents.agent_out(row))


@router.delete("/{agent_id}", response_model=Deleted, responses=ERRORS)
async def delete_agent(agent_id: str, principal: RestPrincipal, state: StateDep) -> JSON:
    """Delete an agent with its channels and their chat history (builder token only)."""
    require_builder(principal)
    async with state.db.connection() as conn:
        row = await agents.delete_agent(conn, workspace_id=principal.workspace_id, agent_id=_agent_id(agent_id))
    if row is None:
        raise NotFound(f"agent {agent_id} not found")
    return JSON({"id": row["id"], "deleted": True})


@router.post("/{agent_id}/channels", status_code=201, response_model=ChannelOut, responses=ERRORS)
async def create_channel(agent_id: str, body: ChannelIn, principal: RestPrincipal, state: StateDep) -> JSON:
    """Add a channel with a fresh public token `wds_chan_…` (builder token only). The token
    of a messaging channel (telegram, slack, whatsapp) is shown here only."""
    require_builder(principal)
    kind = agents.channel_type(body.type)
    async with state.db.connection() as conn:
        row = await agents.create_channel(
            conn, workspace_id=principal.workspace_id, agent_id=_agent_id(agent_id), type=kind
        )
    if row is None:
        raise NotFound(f"agent {agent_id} not found")
    return JSON(agents.channel_out(row, reveal=True), status_code=201)


@router.delete("/{agent_id}/channels/{channel_id}", response_model=Deleted, responses=ERRORS)
async def delete_channel(agent_id: str, channel_id: str, principal: RestPrincipal, state: StateDep) -> JSON:
    """Delete a channel; its token stops working at once (builder token only)."""
    require_builder(principal)
    if not (channel_id.isascii() and channel_id.isdigit()) or len(channel_id) > 18:
        raise NotFound(f"channel {channel_id} not found")
    async with state.db.connection() as conn:
        row = await agents.delete_channel(
            conn, workspace_id=principal.workspace_id, agent_id=_agent_id(agent_id), channel_id=int(channel_id)
        )
    if row is None:
        raise NotFound(f"channel {channel_id} not found")
    return JSON({"id": row["id"], "deleted": True})
