"""AI agents and their chat channels (``{rest}/agents``).

Any REST token may list agents (the spec's "AI agents with their web channel tokens");
creating, editing and deleting agents and channels is for the workspace's builder
credential (vibe_mcp) only, as for the builder MCP tools (DESIGN §4). Which channel
tokens a listing shows is decided in :mod:`storage.agents`: web tokens (public by
design) always, messaging tokens only in the responses that create the channel or
rotate its token.

Settings the agent chat reads are ``config`` on agents (``{write, delete}``) and on
channels (``{credential}``), plus a channel's ``enabled``; a PATCH merges ``config``
(only the keys sent change, ``null`` clears one) — see :mod:`storage.agents`.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from api.chat import messaging
from api.deps import RestPrincipal, StateDep, require_writable
from api.responses import JSON
from api.schemas import ERRORS, Deleted
from api.state import AppState
from storage import agents
from storage.access import Principal, TokenType
from storage.errors import Forbidden, NotFound

router = APIRouter(prefix="/functions/v1/rest-api/agents", tags=["agents"])


class AgentConfig(BaseModel):
    """What the agent may do on its tables in chat; absent keys keep their value, null clears."""

    model_config = ConfigDict(extra="forbid")
    write: StrictBool | None = Field(None, description="may create and update records of its tables")
    delete: StrictBool | None = Field(None, description="may also delete records (only together with write)")


class AgentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    instructions: str = ""
    model: str | None = Field(None, description="chat model; null uses the deployment's default")
    table_ids: list[int] = Field(default_factory=list, description="tables of the workspace the agent may use")
    config: AgentConfig | None = Field(None, description="chat permissions; write and delete default to false")


class AgentPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    instructions: str | None = None
    model: str | None = None
    table_ids: list[int] | None = None
    config: AgentConfig | None = Field(None, description="merged: only the keys sent change, null clears one")


class ChannelConfig(BaseModel):
    """Settings of a channel; absent keys keep their value, null clears."""

    model_config = ConfigDict(extra="forbid")
    credential: StrictStr | None = Field(
        None, description="messaging channels: name of a stored credential of the workspace holding the bot token"
    )


class ChannelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: str = Field(description="web, telegram, slack or whatsapp")
    enabled: StrictBool = Field(True, description="whether the channel answers")
    config: ChannelConfig | None = None


class ChannelPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: StrictBool | None = Field(None, description="turn the channel on or off; absent or null: unchanged")
    config: ChannelConfig | None = Field(None, description="merged: only the keys sent change, null clears one")


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


def _channel_id(channel_id: str) -> int:
    if not (channel_id.isascii() and channel_id.isdigit()) or len(channel_id) > 18:
        raise NotFound(f"channel {channel_id} not found")
    return int(channel_id)


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
    # unset keys stay out (a config key not sent is not "cleared"); storage fills the defaults
    fields = agents.clean_agent_fields(
        body.model_dump(exclude_unset=True), workspace_table_ids=await _table_ids(state, principal), creating=True
    )
    async with state.db.connection() as conn:
        row = await agents.create_agent(conn, workspace_id=principal.workspace_id, **fields)
    return JSON(agents.agent_out(row), status_code=201)


@router.patch("/{agent_id}", response_model=AgentOut, responses=ERRORS)
async def patch_agent(agent_id: str, body: AgentPatch, principal: RestPrincipal, state: StateDep) -> JSON:
    """Change only the sent fields (builder token only); `table_ids` replaces the list,
    `config` merges (only the keys sent change, null clears one)."""
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
    of a messaging channel (telegram, slack, whatsapp) is shown here only. `config.credential`
    must name a stored credential of the workspace. A telegram channel enabled with a
    credential registers its webhook with Telegram (`setWebhook` with a fresh secret token);
    if Telegram refuses, nothing is created (503 `CHANNEL_DELIVERY_FAILED`)."""
    require_builder(principal)
    kind = agents.channel_type(body.type)
    config = body.config.model_dump(exclude_unset=True) if body.config is not None else None
    async with state.db.transaction() as conn:
        row = await agents.create_channel(
            conn, workspace_id=principal.workspace_id, agent_id=_agent_id(agent_id), type=kind,
            config=config, enabled=body.enabled,
        )
        if row is not None and messaging.needs_webhook(row):
            await messaging.register_telegram_webhook(state, conn, workspace_id=principal.workspace_id, channel=row)
    if row is None:
        raise NotFound(f"agent {agent_id} not found")
    return JSON(agents.channel_out(row, reveal=True), status_code=201)


@router.delete("/{agent_id}/channels/{channel_id}", response_model=Deleted, responses=ERRORS)
async def delete_channel(agent_id: str, channel_id: str, principal: RestPrincipal, state: StateDep) -> JSON:
    """Delete a channel; its token stops working at once (builder token only)."""
    require_builder(principal)
    async with state.db.connection() as conn:
        row = await agents.delete_channel(
            conn, workspace_id=principal.workspace_id, agent_id=_agent_id(agent_id), channel_id=_channel_id(channel_id)
        )
    if row is None:
        raise NotFound(f"channel {channel_id} not found")
    return JSON({"id": row["id"], "deleted": True})


@router.patch("/{agent_id}/channels/{channel_id}", response_model=ChannelOut, responses=ERRORS)
async def patch_channel(
    agent_id: str, channel_id: str, body: ChannelPatch, principal: RestPrincipal, state: StateDep
) -> JSON:
    """Enable or disable a channel and/or merge its `config` (builder token only). A
    disabled channel's token answers 404 until it is enabled again; `config.credential`
    must name a stored credential of the workspace. Setting a telegram channel's credential
    or enabling it registers its webhook again with a new secret (503
    `CHANNEL_DELIVERY_FAILED` and nothing changed if Telegram refuses)."""
    require_builder(principal)
    config = body.config.model_dump(exclude_unset=True) if body.config is not None else None
    async with state.db.transaction() as conn:
        row = await agents.update_channel(
            conn, workspace_id=principal.workspace_id, agent_id=_agent_id(agent_id),
            channel_id=_channel_id(channel_id), enabled=body.enabled, config=config,
        )
        # a new bot (credential) or a channel switched on gets its webhook (and a new secret)
        touched = body.enabled is True or "credential" in (config or {})
        if row is not None and touched and messaging.needs_webhook(row):
            await messaging.register_telegram_webhook(state, conn, workspace_id=principal.workspace_id, channel=row)
    if row is None:
        raise NotFound(f"channel {channel_id} not found")
    return JSON(agents.channel_out(row))


@router.post("/{agent_id}/channels/{channel_id}/rotate", response_model=ChannelOut, responses=ERRORS)
async def rotate_channel(agent_id: str, channel_id: str, principal: RestPrincipal, state: StateDep) -> JSON:
    """Give a channel a new token, shown here whatever the channel type; the old token
    stops working at once (builder token only)."""
    require_builder(principal)
    async with state.db.transaction() as conn:
        row = await agents.rotate_channel_token(
            conn, workspace_id=principal.workspace_id, agent_id=_agent_id(agent_id), channel_id=_channel_id(channel_id)
        )
        if row is not None and messaging.needs_webhook(row):  # the webhook URL holds the token
            await messaging.register_telegram_webhook(state, conn, workspace_id=principal.workspace_id, channel=row)
    if row is None:
        raise NotFound(f"channel {channel_id} not found")
    return JSON(agents.channel_out(row, reveal=True))
