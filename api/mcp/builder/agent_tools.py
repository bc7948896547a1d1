"""Builder tools for AI agents and their chat channels.

Agent CRUD and channel create/delete call the REST agent routes; enabling/disabling a
channel and rotating its token have no REST route, so they are done here on
``wds.channels`` directly. A rotated token is shown once, in the tool result.
"""

from __future__ import annotations

from typing import Any

from api.deps import table_or_404
from api.mcp.builder.common import builder, model, pick, positive_id
from api.mcp.spec import DELETED_OUT, ID_OR_NAME, ToolSpec, array, boolean, integer, obj, out, string
from api.mcp.tools_data import route_json
from api.routes import agents as rest_agents
from api.state import AppState
from storage import agents as agent_store
from storage.access import Principal
from storage.errors import NotFound, ValidationError

_AGENT_ID = integer("the agent's id")
_CHANNEL_ID = integer("the channel's id")
_AGENT_PROPS = {
    "name": string("agent name"),
    "instructions": string("what the agent is told (its system prompt)"),
    "model": {"type": ["string", "null"], "description": "chat model; null uses the deployment default"},
    "table_ids": array({"type": ID_OR_NAME}, "tables the agent may use (ids or names)"),
}
_AGENT_OUT = out({"id": {"type": "integer"}, "name": {"type": "string"}, "channels": {"type": "array"}},
                 ("id", "name"))
_CHANNEL_OUT = out({"id": {"type": "integer"}, "type": {"type": "string"}, "token": {"type": ["string", "null"]},
                    "enabled": {"type": "boolean"}}, ("id", "type"))


async def _agent_fields(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    fields = pick(args, "name", "instructions", "model", "table_ids")
    if "table_ids" in fields:
        schema = await state.schema(principal.workspace_id)
        fields["table_ids"] = [table_or_404(schema, ref).id for ref in fields["table_ids"]]
    return fields


async def list_agents(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    return {"agents": route_json(await rest_agents.list_agents(principal, state))}


async def get_agent(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    return route_json(await rest_agents.get_agent(str(positive_id(args["agent_id"], "agent_id")), principal, state))


async def create_agent(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    body = model(rest_agents.AgentIn, await _agent_fields(state, principal, args))
    return route_json(await rest_agents.create_agent(body, principal, state))


async def update_agent(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    fields = await _agent_fields(state, principal, args)
    if not fields:
        raise ValidationError("nothing to change: send name, instructions, model or table_ids")
    body = model(rest_agents.AgentPatch, fields)
    agent_id = str(positive_id(args["agent_id"], "agent_id"))
    return route_json(await rest_agents.patch_agent(agent_id, body, principal, state))


async def delete_agent(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    agent_id = str(positive_id(args["agent_id"], "agent_id"))
    return route_json(await rest_agents.delete_agent(agent_id, principal, state))


async def list_channels(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    agent_id = positive_id(args["agent_id"], "agent_id") if "agent_id" in args else None
    async with state.db.connection() as conn:
        cur = await conn.execute(
            "SELECT id, agent_id, type, token, enabled, created_at FROM wds.channels"
            " WHERE workspace_id = %s AND (%s::bigint IS NULL OR agent_id = %s) ORDER BY id",
            (principal.workspace_id, agent_id, agent_id),
        )
        rows = await cur.fetchall()
    return {"channels": [{**agent_store.channel_out(r), "agent_id": r["agent_id"]} for r in rows]}


async def create_channel(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    agent_id = str(positive_id(args["agent_id"], "agent_id"))
    body = model(rest_agents.ChannelIn, {"type": args.get("type", "web")})
    return route_json(await rest_agents.create_channel(agent_id, body, principal, state))


async def _channel(state: AppState, principal: Principal, channel_id: int) -> dict[str, Any]:
    async with state.db.connection() as conn:
        cur = await conn.execute(
            "SELECT id, agent_id, type, token, enabled FROM wds.channels WHERE id = %s AND workspace_id = %s",
            (channel_id, principal.workspace_id),
        )
        row = await cur.fetchone()
    if row is None:
        raise NotFound(f"channel {channel_id} not found")
    return row


async def update_channel(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    rest_agents.require_builder(principal)
    channel = await _channel(state, principal, positive_id(args["channel_id"], "channel_id"))
    async with state.db.connection() as conn:
        cur = await conn.execute(
            "UPDATE wds.channels SET enabled = %s WHERE id = %s RETURNING id, agent_id, type, token, enabled",
            (args["enabled"], channel["id"]),
        )
        row = await cur.fetchone()
    assert row is not None
    return {**agent_store.channel_out(row), "agent_id": row["agent_id"]}


async def delete_channel(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    channel = await _channel(state, principal, positive_id(args["channel_id"], "channel_id"))
    resp = await rest_agents.delete_channel(str(channel["agent_id"]), str(channel["id"]), principal, state)
    return route_json(resp)


async def rotate_channel_token(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    rest_agents.require_builder(principal)
    channel = await _channel(state, principal, positive_id(args["channel_id"], "channel_id"))
    async with state.db.connection() as conn:
        cur = await conn.execute(
            "UPDATE wds.channels SET token = %s WHERE id = %s RETURNING id, agent_id, type, token, enabled",
            (agent_store.new_channel_token(), channel["id"]),
        )
        row = await cur.fetchone()
    assert row is not None
    # the new token is shown now whatever the channel type; the old one stops working at once
    return {**agent_store.channel_out(row, reveal=True), "agent_id": row["agent_id"]}


AGENT_TOOLS: list[ToolSpec] = [
    builder("list_agents", "List agents", "AI agents of the workspace with their channels.",
            list_agents, obj({}), out({"agents": {"type": "array"}}, ("agents",)), read_only=True, idempotent=True),
    builder("create_agent", "Create an agent", "Create an AI agent that may use the given tables.",
            create_agent, obj(_AGENT_PROPS, ("name",)), _AGENT_OUT),
    builder("update_agent", "Update an agent", "Change an agent's name, instructions, model or tables.",
            update_agent, obj({"agent_id": _AGENT_ID, **_AGENT_PROPS}, ("agent_id",)), _AGENT_OUT, idempotent=True),
    builder("delete_agent", "Delete an agent", "Delete an agent with its channels and chat history.",
            delete_agent, obj({"agent_id": _AGENT_ID}, ("agent_id",)), DELETED_OUT, destructive=True,
            idempotent=True),
    builder("get_agent", "Get an agent", "One agent with its tables and channels.",
            get_agent, obj({"agent_id": _AGENT_ID}, ("agent_id",)), _AGENT_OUT, read_only=True, idempotent=True),
    builder("list_channels", "List channels",
            "Chat channels (all, or one agent's); messaging channel tokens are not shown.",
            list_channels, obj({"agent_id": _AGENT_ID}), out({"channels": {"type": "array"}}, ("channels",)),
            read_only=True, idempotent=True),
    builder("create_channel", "Create a channel",
            "Add a chat channel to an agent; returns its public token (wds_chan_…).",
            create_channel, obj({"agent_id": _AGENT_ID,
                                 "type": string("channel type (default web)", enum=list(agent_store.CHANNEL_TYPES))},
                                ("agent_id",)), _CHANNEL_OUT),
    builder("update_channel", "Enable or disable a channel", "Turn a channel on or off.",
            update_channel, obj({"channel_id": _CHANNEL_ID, "enabled": boolean("whether the channel answers")},
                                ("channel_id", "enabled")), _CHANNEL_OUT, idempotent=True),
    builder("delete_channel", "Delete a channel", "Delete a channel; its token stops working at once.",
            delete_channel, obj({"channel_id": _CHANNEL_ID}, ("channel_id",)), DELETED_OUT, destructive=True,
            idempotent=True),
    builder("rotate_channel_token", "Rotate a channel token",
            "Give a channel a new token (shown once here); the old token stops working at once.",
            rotate_channel_token, obj({"channel_id": _CHANNEL_ID}, ("channel_id",)), _CHANNEL_OUT,
            destructive=True),
]
