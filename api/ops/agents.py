"""AI agents and their chat channels, for every door.

Agents and channels are the workspace's builder credential's (vibe_mcp) only (DESIGN §4):
reading them (list, get, their channels) follows the same rule as creating, editing and
deleting them, so a token that may not manage agents never sees an agent's instructions,
its tables or its channel tokens (403 ``FORBIDDEN``; the workspace overview lists no
agents to it). Reads stay open in a read-only workspace. Which channel tokens an answer
shows is decided in :mod:`storage.agents`: web tokens always, messaging tokens only in
the answers that create the channel or rotate its token.

Settings the agent chat reads are ``config`` on agents (``{write, delete}``) and on
channels (``{credential}``), plus a channel's ``enabled``; an update merges ``config``
(only the keys sent change, ``null`` clears one) — see :mod:`storage.agents`.

Agent and channel ids may be given as the path segment REST received (a non-id is
"not found", after the builder check) or as integers.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from api.deps import require_writable
from api.services import messaging
from api.state import AppState
from storage import agents
from storage.access import Principal, TokenType
from storage.errors import Forbidden, NotFound


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


def may_manage_agents(principal: Principal) -> bool:
    """Whether ``principal`` may see and manage agents and channels: the builder credential only."""
    return principal.type is TokenType.VIBE_MCP


def require_agent_reader(principal: Principal) -> None:
    """Reading agents and channels follows the rule of managing them (builder only); a
    read-only workspace still reads."""
    if not may_manage_agents(principal):
        raise Forbidden("agents and channels need the workspace's builder token")


def require_builder(principal: Principal) -> None:
    """Managing agents is for the builder credential (vibe_mcp) only."""
    if not may_manage_agents(principal):
        raise Forbidden("managing agents and channels needs the workspace's builder token")
    require_writable(principal)


async def _table_ids(state: AppState, principal: Principal) -> set[int]:
    return set((await state.schema(principal.workspace_id)).tables)


def _id(value: int | str, what: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value)
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise NotFound(f"{what} {value} not found")
    return int(text)


async def list_agents(state: AppState, principal: Principal) -> list[dict[str, Any]]:
    """AI agents of the workspace with their channels (web channel tokens included);
    builder only."""
    require_agent_reader(principal)
    async with state.db.connection() as conn:
        rows = await agents.list_agents(conn, workspace_id=principal.workspace_id)
    return [agents.agent_out(r) for r in rows]


async def get_agent(state: AppState, principal: Principal, agent_id: int | str) -> dict[str, Any]:
    """One agent with its tables and channels (builder only)."""
    require_agent_reader(principal)
    async with state.db.connection() as conn:
        row = await agents.get_agent(conn, workspace_id=principal.workspace_id, agent_id=_id(agent_id, "agent"))
    if row is None:
        raise NotFound(f"agent {agent_id} not found")
    return agents.agent_out(row)


async def create_agent(state: AppState, principal: Principal, body: AgentIn) -> dict[str, Any]:
    """Create an agent (builder only); ``table_ids`` must be tables of the workspace."""
    require_builder(principal)
    # unset keys stay out (a config key not sent is not "cleared"); storage fills the defaults
    fields = agents.clean_agent_fields(
        body.model_dump(exclude_unset=True), workspace_table_ids=await _table_ids(state, principal), creating=True
    )
    async with state.db.connection() as conn:
        row = await agents.create_agent(conn, workspace_id=principal.workspace_id, **fields)
    return agents.agent_out(row)


async def update_agent(state: AppState, principal: Principal, agent_id: int | str, body: AgentPatch) -> dict[str, Any]:
    """Change only the sent fields (builder only); ``table_ids`` replaces the list,
    ``config`` merges (only the keys sent change, null clears one)."""
    require_builder(principal)
    fields = agents.clean_agent_fields(
        body.model_dump(exclude_unset=True), workspace_table_ids=await _table_ids(state, principal), creating=False
    )
    async with state.db.connection() as conn:
        row = await agents.update_agent(
            conn, workspace_id=principal.workspace_id, agent_id=_id(agent_id, "agent"), changes=fields
        )
    if row is None:
        raise NotFound(f"agent {agent_id} not found")
    return agents.agent_out(row)


async def delete_agent(state: AppState, principal: Principal, agent_id: int | str) -> dict[str, Any]:
    """Delete an agent with its channels and their chat history (builder only)."""
    require_builder(principal)
    async with state.db.connection() as conn:
        row = await agents.delete_agent(conn, workspace_id=principal.workspace_id, agent_id=_id(agent_id, "agent"))
    if row is None:
        raise NotFound(f"agent {agent_id} not found")
    return {"id": row["id"], "deleted": True}


async def list_channels(state: AppState, principal: Principal, agent_id: int | None = None) -> list[dict[str, Any]]:
    """Channels of the workspace (or of one agent), each with its ``agent_id``; messaging
    channel tokens are not shown. Builder only."""
    require_agent_reader(principal)
    async with state.db.connection() as conn:
        rows = await agents.list_channels(conn, workspace_id=principal.workspace_id, agent_id=agent_id)
    return [{**agents.channel_out(r), "agent_id": r["agent_id"]} for r in rows]


async def get_channel(state: AppState, principal: Principal, channel_id: int) -> dict[str, Any]:
    """A channel's stored row (with its ``agent_id``), for doors that name channels alone
    (builder only)."""
    require_agent_reader(principal)
    async with state.db.connection() as conn:
        row = await agents.get_channel(conn, workspace_id=principal.workspace_id, channel_id=channel_id)
    if row is None:
        raise NotFound(f"channel {channel_id} not found")
    return row


async def create_channel(state: AppState, principal: Principal, agent_id: int | str, body: ChannelIn) -> dict[str, Any]:
    """Add a channel with a fresh public token ``wds_chan_…`` (builder only), shown here
    whatever its type. A telegram channel enabled with a credential registers its webhook
    with Telegram; if Telegram refuses, nothing is created (``CHANNEL_DELIVERY_FAILED``)."""
    require_builder(principal)
    kind = agents.channel_type(body.type)
    config = body.config.model_dump(exclude_unset=True) if body.config is not None else None
    async with state.db.transaction() as conn:
        row = await agents.create_channel(
            conn, workspace_id=principal.workspace_id, agent_id=_id(agent_id, "agent"), type=kind,
            config=config, enabled=body.enabled,
        )
        if row is not None and messaging.needs_webhook(row):
            await messaging.register_telegram_webhook(state, conn, workspace_id=principal.workspace_id, channel=row)
    if row is None:
        raise NotFound(f"agent {agent_id} not found")
    return agents.channel_out(row, reveal=True)


async def delete_channel(
    state: AppState, principal: Principal, agent_id: int | str, channel_id: int | str
) -> dict[str, Any]:
    """Delete a channel; its token stops working at once (builder only)."""
    require_builder(principal)
    async with state.db.connection() as conn:
        row = await agents.delete_channel(
            conn, workspace_id=principal.workspace_id, agent_id=_id(agent_id, "agent"),
            channel_id=_id(channel_id, "channel"),
        )
    if row is None:
        raise NotFound(f"channel {channel_id} not found")
    return {"id": row["id"], "deleted": True}


async def update_channel(
    state: AppState, principal: Principal, agent_id: int | str, channel_id: int | str, body: ChannelPatch
) -> dict[str, Any]:
    """Enable or disable a channel and/or merge its ``config`` (builder only). Setting a
    telegram channel's credential or enabling it registers its webhook again with a new
    secret (``CHANNEL_DELIVERY_FAILED`` and nothing changed if Telegram refuses)."""
    require_builder(principal)
    config = body.config.model_dump(exclude_unset=True) if body.config is not None else None
    async with state.db.transaction() as conn:
        row = await agents.update_channel(
            conn, workspace_id=principal.workspace_id, agent_id=_id(agent_id, "agent"),
            channel_id=_id(channel_id, "channel"), enabled=body.enabled, config=config,
        )
        # a new bot (credential) or a channel switched on gets its webhook (and a new secret)
        touched = body.enabled is True or "credential" in (config or {})
        if row is not None and touched and messaging.needs_webhook(row):
            await messaging.register_telegram_webhook(state, conn, workspace_id=principal.workspace_id, channel=row)
    if row is None:
        raise NotFound(f"channel {channel_id} not found")
    return agents.channel_out(row)


async def rotate_channel(
    state: AppState, principal: Principal, agent_id: int | str, channel_id: int | str
) -> dict[str, Any]:
    """Give a channel a new token, shown here whatever the channel type; the old token
    stops working at once (builder only)."""
    require_builder(principal)
    async with state.db.transaction() as conn:
        row = await agents.rotate_channel_token(
            conn, workspace_id=principal.workspace_id, agent_id=_id(agent_id, "agent"),
            channel_id=_id(channel_id, "channel"),
        )
        if row is not None and messaging.needs_webhook(row):  # the webhook URL holds the token
            await messaging.register_telegram_webhook(state, conn, workspace_id=principal.workspace_id, channel=row)
    if row is None:
        raise NotFound(f"channel {channel_id} not found")
    return agents.channel_out(row, reveal=True)
