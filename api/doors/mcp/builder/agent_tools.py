"""Builder tools for AI agents and their chat channels.

Every tool is a thin adapter over :mod:`api.ops.agents` (the operations REST calls too:
one implementation, the same checks); the channel tools take a bare ``channel_id``, so
they first find the channel's agent with :func:`api.ops.agents.get_channel`. A rotated token is shown once,
in the tool result.
"""

from __future__ import annotations

from typing import Any

from api.deps import table_or_404
from api.doors.mcp.builder.common import builder, model, pick, positive_id
from api.doors.mcp.spec import DELETED_OUT, ID_OR_NAME, ToolSpec, array, boolean, integer, obj, out, string
from api.ops import agents as ops
from api.state import AppState
from storage import agents as agent_store
from storage.access import Principal
from storage.errors import ValidationError

_NULLABLE_BOOL = ["boolean", "null"]

_AGENT_ID = integer("the agent's id")
_CHANNEL_ID = integer("the channel's id")
_AGENT_PROPS = {
    "name": string("agent name"),
    "instructions": string("what the agent is told (its system prompt)"),
    "model": {"type": ["string", "null"], "description": "chat model; null uses the deployment default"},
    "table_ids": array({"type": ID_OR_NAME}, "tables the agent may use (ids or names)"),
    "config": obj({
        "write": {"type": _NULLABLE_BOOL, "description": "may create and update records of its tables (default false)"},
        "delete": {"type": _NULLABLE_BOOL, "description": "may also delete records; needs write (default false)"},
    }, description="what the agent may do in chat; on update only the keys sent change, null clears one"),
}
_CHANNEL_SETTINGS = {
    "enabled": boolean("whether the channel answers (a disabled channel's token answers 404)"),
    "config": obj({
        "credential": {"type": ["string", "null"],
                       "description": "messaging channels: name of a stored credential holding the bot token"},
    }, description="channel settings; on update only the keys sent change, null clears one"),
}
_AGENT_OUT = out({"id": {"type": "integer"}, "name": {"type": "string"}, "config": {"type": "object"},
                  "channels": {"type": "array"}}, ("id", "name"))
_CHANNEL_OUT = out({"id": {"type": "integer"}, "type": {"type": "string"}, "token": {"type": ["string", "null"]},
                    "enabled": {"type": "boolean"}, "config": {"type": "object"}, "agent_id": {"type": "integer"}},
                   ("id", "type"))


async def _agent_fields(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    fields = pick(args, "name", "instructions", "model", "table_ids", "config")
    if "table_ids" in fields:
        schema = await state.schema(principal.workspace_id)
        fields["table_ids"] = [table_or_404(schema, ref).id for ref in fields["table_ids"]]
    return fields


async def list_agents(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    return {"agents": await ops.list_agents(state, principal)}


async def get_agent(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    return await ops.get_agent(state, principal, positive_id(args["agent_id"], "agent_id"))


async def create_agent(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    body = model(ops.AgentIn, await _agent_fields(state, principal, args))
    return await ops.create_agent(state, principal, body)


async def update_agent(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    fields = await _agent_fields(state, principal, args)
    if not fields:
        raise ValidationError("nothing to change: send name, instructions, model, table_ids or config")
    body = model(ops.AgentPatch, fields)
    return await ops.update_agent(state, principal, positive_id(args["agent_id"], "agent_id"), body)


async def delete_agent(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    return await ops.delete_agent(state, principal, positive_id(args["agent_id"], "agent_id"))


async def list_channels(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    agent_id = positive_id(args["agent_id"], "agent_id") if "agent_id" in args else None
    return {"channels": await ops.list_channels(state, principal, agent_id)}


async def create_channel(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    agent_id = positive_id(args["agent_id"], "agent_id")
    body = model(ops.ChannelIn, {"type": args.get("type", "web"), **pick(args, "enabled", "config")})
    return await ops.create_channel(state, principal, agent_id, body)


async def update_channel(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    fields = pick(args, "enabled", "config")
    if not fields:
        raise ValidationError("nothing to change: send enabled or config")
    body = model(ops.ChannelPatch, fields)
    channel = await ops.get_channel(state, principal, positive_id(args["channel_id"], "channel_id"))
    out = await ops.update_channel(state, principal, channel["agent_id"], channel["id"], body)
    return {**out, "agent_id": channel["agent_id"]}


async def delete_channel(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    channel = await ops.get_channel(state, principal, positive_id(args["channel_id"], "channel_id"))
    return await ops.delete_channel(state, principal, channel["agent_id"], channel["id"])


async def rotate_channel_token(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    channel = await ops.get_channel(state, principal, positive_id(args["channel_id"], "channel_id"))
    # the new token is shown now whatever the channel type; the old one stops working at once
    out = await ops.rotate_channel(state, principal, channel["agent_id"], channel["id"])
    return {**out, "agent_id": channel["agent_id"]}


AGENT_TOOLS: list[ToolSpec] = [
    builder("list_agents", "List agents", "AI agents of the workspace with their channels.",
            list_agents, obj({}), out({"agents": {"type": "array"}}, ("agents",)), read_only=True, idempotent=True),
    builder("create_agent", "Create an agent", "Create an AI agent that may use the given tables.",
            create_agent, obj(_AGENT_PROPS, ("name",)), _AGENT_OUT),
    builder("update_agent", "Update an agent",
            "Change an agent's name, instructions, model, tables or chat permissions (config).",
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
                                 "type": string("channel type (default web)", enum=list(agent_store.CHANNEL_TYPES)),
                                 **_CHANNEL_SETTINGS}, ("agent_id",)), _CHANNEL_OUT),
    builder("update_channel", "Update a channel",
            "Turn a channel on or off and/or change its settings (config.credential: the bot token's credential).",
            update_channel, obj({"channel_id": _CHANNEL_ID, **_CHANNEL_SETTINGS}, ("channel_id",)), _CHANNEL_OUT,
            idempotent=True),
    builder("delete_channel", "Delete a channel", "Delete a channel; its token stops working at once.",
            delete_channel, obj({"channel_id": _CHANNEL_ID}, ("channel_id",)), DELETED_OUT, destructive=True,
            idempotent=True),
    builder("rotate_channel_token", "Rotate a channel token",
            "Give a channel a new token (shown once here); the old token stops working at once.",
            rotate_channel_token, obj({"channel_id": _CHANNEL_ID}, ("channel_id",)), _CHANNEL_OUT,
            destructive=True),
]
