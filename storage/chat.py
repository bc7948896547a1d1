"""Agent chat persistence: resolving a channel token, and the per-session history.

History lives in ``wds.chat_messages`` per channel and ``session_id``: the user's
message, the assistant's reply (with the tool calls it made in ``tool_calls``), in
order. A session id is chosen by the client (the web page keeps one in local storage;
messaging channels derive it from the chat), so it is only ever read together with its
channel: one channel's sessions are invisible to another.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

Conn = AsyncConnection[Any]


async def channel_for_token(conn: Conn, *, token: str) -> dict[str, Any] | None:
    """The channel with this token (enabled or not), its agent and the workspace's state.

    One round trip: ``id, workspace_id, type, enabled, config, webhook_secret_hash`` of the channel,
    ``agent_id, agent_name, instructions, model, agent_config, table_ids`` (tables that
    still exist) and ``plan, read_only`` of the workspace.
    """
    cur = await conn.execute(
        "SELECT c.id, c.workspace_id, c.type, c.enabled, c.config, c.webhook_secret_hash,"
        " a.id AS agent_id, a.name AS agent_name,"
        " a.instructions, a.model, a.config AS agent_config, w.plan, w.read_only,"
        " (SELECT coalesce(jsonb_agg(t.id ORDER BY t.id), '[]'::jsonb) FROM wds.tables t"
        "   WHERE t.workspace_id = a.workspace_id AND a.table_ids @> to_jsonb(t.id)) AS table_ids"
        " FROM wds.channels c JOIN wds.agents a ON a.id = c.agent_id AND a.workspace_id = c.workspace_id"
        " JOIN wds.workspaces w ON w.id = c.workspace_id WHERE c.token = %s",
        (token,),
    )
    return await cur.fetchone()


async def history(conn: Conn, *, channel_id: int, session_id: str, limit: int) -> list[dict[str, Any]]:
    """The session's last ``limit`` messages, oldest first."""
    cur = await conn.execute(
        "SELECT id, role, content, tool_calls, created_at FROM (SELECT * FROM wds.chat_messages"
        " WHERE channel_id = %s AND session_id = %s ORDER BY id DESC LIMIT %s) m ORDER BY id",
        (channel_id, session_id, limit),
    )
    return await cur.fetchall()


async def add_messages(
    conn: Conn, *, workspace_id: int, channel_id: int, session_id: str,
    messages: Sequence[tuple[str, str, list[dict[str, Any]]]],
) -> list[int]:
    """Append ``(role, content, tool_calls)`` messages; returns their ids in order."""
    ids: list[int] = []
    for role, content, tool_calls in messages:
        cur = await conn.execute(
            "INSERT INTO wds.chat_messages (workspace_id, channel_id, session_id, role, content, tool_calls)"
            " VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
            (workspace_id, channel_id, session_id, role, content, Jsonb(tool_calls)),
        )
        row = await cur.fetchone()
        assert row is not None
        ids.append(int(row["id"]))
    return ids
