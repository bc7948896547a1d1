"""AI agents and their chat channels (``{rest}/agents``): REST over :mod:`api.ops.agents`.

Agents and channels are for the workspace's builder credential (vibe_mcp) only, as for
the builder MCP tools (DESIGN §4): listing and reading them too (:mod:`api.ops.agents`
decides; a restricted rest_api token gets 403 ``FORBIDDEN``). Which channel
tokens a listing shows is decided in :mod:`storage.agents`: web tokens (public by
design) always, messaging tokens only in the responses that create the channel or
rotate its token.

Settings the agent chat reads are ``config`` on agents (``{write, delete}``) and on
channels (``{credential}``), plus a channel's ``enabled``; a PATCH merges ``config``
(only the keys sent change, ``null`` clears one) — see :mod:`storage.agents`.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from api.deps import RestPrincipal, StateDep
from api.ops import agents as ops
from api.ops.agents import AgentIn, AgentPatch, ChannelIn, ChannelPatch
from api.responses import JSON
from api.schemas import ERRORS, Deleted

router = APIRouter(prefix="/functions/v1/rest-api/agents", tags=["agents"])


class AgentConfigOut(BaseModel):
    write: bool
    delete: bool


class ChannelConfigOut(BaseModel):
    credential: str | None = None


class ChannelOut(BaseModel):
    id: int
    type: str
    token: str | None = Field(
        None, description="web channels always; other types only when created or when the token is rotated"
    )
    enabled: bool
    config: ChannelConfigOut


class AgentOut(BaseModel):
    id: int
    name: str
    instructions: str
    model: str | None
    table_ids: list[int]
    config: AgentConfigOut
    channels: list[ChannelOut]
    created_at: str
    updated_at: str


@router.get("", response_model=list[AgentOut], responses=ERRORS)
async def list_agents(principal: RestPrincipal, state: StateDep) -> JSON:
    """AI agents of the workspace with their channels, web channel tokens included (builder token only)."""
    return JSON(await ops.list_agents(state, principal))


@router.get("/{agent_id}", response_model=AgentOut, responses=ERRORS)
async def get_agent(agent_id: str, principal: RestPrincipal, state: StateDep) -> JSON:
    """One agent with its tables and channels (builder token only)."""
    return JSON(await ops.get_agent(state, principal, agent_id))


@router.post("", status_code=201, response_model=AgentOut, responses=ERRORS)
async def create_agent(body: AgentIn, principal: RestPrincipal, state: StateDep) -> JSON:
    """Create an agent (builder token only); `table_ids` must be tables of the workspace."""
    return JSON(await ops.create_agent(state, principal, body), status_code=201)


@router.patch("/{agent_id}", response_model=AgentOut, responses=ERRORS)
async def patch_agent(agent_id: str, body: AgentPatch, principal: RestPrincipal, state: StateDep) -> JSON:
    """Change only the sent fields (builder token only); `table_ids` replaces the list,
    `config` merges (only the keys sent change, null clears one)."""
    return JSON(await ops.update_agent(state, principal, agent_id, body))


@router.delete("/{agent_id}", response_model=Deleted, responses=ERRORS)
async def delete_agent(agent_id: str, principal: RestPrincipal, state: StateDep) -> JSON:
    """Delete an agent with its channels and their chat history (builder token only)."""
    return JSON(await ops.delete_agent(state, principal, agent_id))


@router.post("/{agent_id}/channels", status_code=201, response_model=ChannelOut, responses=ERRORS)
async def create_channel(agent_id: str, body: ChannelIn, principal: RestPrincipal, state: StateDep) -> JSON:
    """Add a channel with a fresh public token `wds_chan_…` (builder token only). The token
    of a messaging channel (telegram, slack, whatsapp) is shown here only. `config.credential`
    must name a stored credential of the workspace. A telegram channel enabled with a
    credential registers its webhook with Telegram (`setWebhook` with a fresh secret token);
    if Telegram refuses, nothing is created (503 `CHANNEL_DELIVERY_FAILED`)."""
    return JSON(await ops.create_channel(state, principal, agent_id, body), status_code=201)


@router.delete("/{agent_id}/channels/{channel_id}", response_model=Deleted, responses=ERRORS)
async def delete_channel(agent_id: str, channel_id: str, principal: RestPrincipal, state: StateDep) -> JSON:
    """Delete a channel; its token stops working at once (builder token only)."""
    return JSON(await ops.delete_channel(state, principal, agent_id, channel_id))


@router.patch("/{agent_id}/channels/{channel_id}", response_model=ChannelOut, responses=ERRORS)
async def patch_channel(
    agent_id: str, channel_id: str, body: ChannelPatch, principal: RestPrincipal, state: StateDep
) -> JSON:
    """Enable or disable a channel and/or merge its `config` (builder token only). A
    disabled channel's token answers 404 until it is enabled again; `config.credential`
    must name a stored credential of the workspace. Setting a telegram channel's credential
    or enabling it registers its webhook again with a new secret (503
    `CHANNEL_DELIVERY_FAILED` and nothing changed if Telegram refuses)."""
    return JSON(await ops.update_channel(state, principal, agent_id, channel_id, body))


@router.post("/{agent_id}/channels/{channel_id}/rotate", response_model=ChannelOut, responses=ERRORS)
async def rotate_channel(agent_id: str, channel_id: str, principal: RestPrincipal, state: StateDep) -> JSON:
    """Give a channel a new token, shown here whatever the channel type; the old token
    stops working at once (builder token only)."""
    return JSON(await ops.rotate_channel(state, principal, agent_id, channel_id))
