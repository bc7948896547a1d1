"""AI agents of a workspace and their chat channels (DESIGN §4 "Agents and channels").

An agent is ``{name, instructions, model?, table_ids}``: what it is told, which model
answers (``None``: the deployment's default), and the tables it may use. A channel is
one way to talk to an agent — ``web`` (the embeddable chat), ``telegram``, ``slack`` or
``whatsapp`` — identified by a token ``wds_chan_…`` that goes in the webhook's query
string instead of a bearer token.

Token visibility, decided here: a *web* channel's token is public by design (it sits in
the page that embeds the chat), so listings show it. A messaging channel's token is the
secret part of the webhook URL registered with Telegram, Slack or WhatsApp — whoever
knows it can post as that platform — so it is returned once, when the channel is
created, and listings show ``token: null`` for it (:func:`agent_out`).

Agents keep table ids; a table deleted later simply drops out of ``table_ids`` when
agents are read (the listing query keeps only tables that still exist).
"""

from __future__ import annotations

import secrets
from collections.abc import Collection, Mapping
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from storage.errors import ValidationError
from storage.values import iso

Conn = AsyncConnection[Any]

CHANNEL_TYPES = ("web", "telegram", "slack", "whatsapp")
PUBLIC_TOKEN_TYPES = frozenset({"web"})
CHANNEL_TOKEN_PREFIX = "wds_chan_"
MAX_NAME = 255
MAX_INSTRUCTIONS = 100_000
MAX_MODEL = 200
MAX_TABLES = 500


def new_channel_token() -> str:
    """A fresh channel token: the prefix and 192 random bits."""
    return CHANNEL_TOKEN_PREFIX + secrets.token_urlsafe(24)


# --------------------------------------------------------------------------- validation


def clean_agent_fields(
    fields: Mapping[str, Any], *, workspace_table_ids: Collection[int], creating: bool
) -> dict[str, Any]:
    """Check agent fields; returns the subset to store, normalised.

    Args:
        fields: any of ``name``, ``instructions``, ``model``, ``table_ids``.
        workspace_table_ids: ids of the workspace's tables (``table_ids`` must be among them).
        creating: ``name`` is then required.

    Raises:
        ValidationError: an unknown key, a missing or empty name, a value of the wrong
            type or size, a table id that is not a table of the workspace.
    """
    unknown = sorted(set(fields) - {"name", "instructions", "model", "table_ids"})
    if unknown:
        raise ValidationError(f"unknown agent field(s): {', '.join(unknown)}")
    out: dict[str, Any] = {}
    if creating or "name" in fields:
        name = fields.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ValidationError("an agent needs a non-empty name")
        if len(name.strip()) > MAX_NAME or any(ord(c) < 32 for c in name.strip()):
            raise ValidationError(f"agent name is longer than {MAX_NAME} characters or has control characters")
        out["name"] = name.strip()
    if "instructions" in fields:
        text = fields["instructions"]
        if text is None:
            text = ""
        if not isinstance(text, str) or len(text) > MAX_INSTRUCTIONS:
            raise ValidationError(f"instructions must be a string of at most {MAX_INSTRUCTIONS} characters")
        out["instructions"] = text
    if "model" in fields:
        model = fields["model"]
        if model is not None and (not isinstance(model, str) or not model.strip() or len(model) > MAX_MODEL):
            raise ValidationError(f"model must be a non-empty string of at most {MAX_MODEL} characters, or null")
        out["model"] = model.strip() if isinstance(model, str) else None
    if "table_ids" in fields:
        out["table_ids"] = _table_ids(fields["table_ids"], workspace_table_ids)
    return out


def _table_ids(value: Any, known: Collection[int]) -> list[int]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValidationError("table_ids must be a list of table ids")
    ids = list(dict.fromkeys(value))
    if len(ids) > MAX_TABLES:
        raise ValidationError(f"an agent may be granted at most {MAX_TABLES} tables")
    missing = [i for i in ids if i not in known]
    if missing:
        raise ValidationError(f"not tables of this workspace: {', '.join(map(str, missing))}")
    return ids


def channel_type(value: Any) -> str:
    """A channel type, checked.

    Raises:
        ValidationError: not one of :data:`CHANNEL_TYPES`.
    """
    if value not in CHANNEL_TYPES:
        raise ValidationError(f"channel type must be one of {', '.join(CHANNEL_TYPES)}")
    return str(value)


# --------------------------------------------------------------------------- output


def channel_out(channel: Mapping[str, Any], *, reveal: bool = False) -> dict[str, Any]:
    """A channel as listed; the token only for web channels unless ``reveal`` (creation)."""
    shown = reveal or channel["type"] in PUBLIC_TOKEN_TYPES
    return {
        "id": channel["id"],
        "type": channel["type"],
        "token": channel["token"] if shown else None,
        "enabled": channel["enabled"],
    }


def agent_out(row: Mapping[str, Any]) -> dict[str, Any]:
    """The API shape of an agent row from :func:`list_agents` / :func:`get_agent`."""
    return {
        "id": row["id"],
        "name": row["name"],
        "instructions": row["instructions"],
        "model": row["model"],
        "table_ids": row["table_ids"],
        "channels": [channel_out(c) for c in row["channels"]],
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }


# --------------------------------------------------------------------------- persistence

# One statement for agents with their live table ids and their channels (tokens
# included: callers decide what to show through agent_out).
_SELECT = (
    "SELECT a.id, a.workspace_id, a.name, a.instructions, a.model, a.created_at, a.updated_at,"
    " (SELECT coalesce(jsonb_agg(x.v ORDER BY x.n), '[]'::jsonb)"
    "    FROM jsonb_array_elements(a.table_ids) WITH ORDINALITY AS x(v, n)"
    "    JOIN wds.tables t ON t.id = (x.v)::bigint AND t.workspace_id = a.workspace_id) AS table_ids,"
    " (SELECT coalesce(jsonb_agg(jsonb_build_object('id', c.id, 'type', c.type, 'token', c.token,"
    "    'enabled', c.enabled) ORDER BY c.id), '[]'::jsonb)"
    "    FROM wds.channels c WHERE c.agent_id = a.id) AS channels"
    " FROM wds.agents a"
)


async def list_agents(conn: Conn, *, workspace_id: int) -> list[dict[str, Any]]:
    """Every agent of the workspace with ``table_ids`` and ``channels``, in one query."""
    cur = await conn.execute(_SELECT + " WHERE a.workspace_id = %s ORDER BY a.id", (workspace_id,))
    return await cur.fetchall()


async def get_agent(conn: Conn, *, workspace_id: int, agent_id: int) -> dict[str, Any] | None:
    cur = await conn.execute(_SELECT + " WHERE a.workspace_id = %s AND a.id = %s", (workspace_id, agent_id))
    return await cur.fetchone()


async def create_agent(
    conn: Conn,
    *,
    workspace_id: int,
    name: str,
    instructions: str = "",
    model: str | None = None,
    table_ids: list[int] | None = None,
) -> dict[str, Any]:
    """Insert an agent (fields from :func:`clean_agent_fields`); returns it as :func:`get_agent`."""
    cur = await conn.execute(
        "INSERT INTO wds.agents (workspace_id, name, instructions, model, table_ids)"
        " VALUES (%s, %s, %s, %s, %s) RETURNING id",
        (workspace_id, name, instructions, model, Jsonb(table_ids or [])),
    )
    row = await cur.fetchone()
    assert row is not None
    agent = await get_agent(conn, workspace_id=workspace_id, agent_id=row["id"])
    assert agent is not None
    return agent


async def update_agent(
    conn: Conn, *, workspace_id: int, agent_id: int, changes: Mapping[str, Any]
) -> dict[str, Any] | None:
    """Apply cleaned ``changes``; the agent as :func:`get_agent`, ``None`` if absent."""
    allowed = {k: v for k, v in changes.items() if k in ("name", "instructions", "model", "table_ids")}
    sets = "".join(f"{k} = %s, " for k in allowed)
    params = [Jsonb(v) if k == "table_ids" else v for k, v in allowed.items()]
    cur = await conn.execute(
        f"UPDATE wds.agents SET {sets}updated_at = now() WHERE id = %s AND workspace_id = %s RETURNING id",
        (*params, agent_id, workspace_id),
    )
    if await cur.fetchone() is None:
        return None
    return await get_agent(conn, workspace_id=workspace_id, agent_id=agent_id)


async def delete_agent(conn: Conn, *, workspace_id: int, agent_id: int) -> dict[str, Any] | None:
    """Delete an agent; its channels (and their chat history) go with it by cascade."""
    cur = await conn.execute(
        "DELETE FROM wds.agents WHERE id = %s AND workspace_id = %s RETURNING id", (agent_id, workspace_id)
    )
    return await cur.fetchone()


async def create_channel(
    conn: Conn, *, workspace_id: int, agent_id: int, type: str
) -> dict[str, Any] | None:
    """Add a channel with a fresh token to an agent; ``None`` when the agent is absent."""
    cur = await conn.execute(
        "INSERT INTO wds.channels (workspace_id, agent_id, type, token)"
        " SELECT a.workspace_id, a.id, %s, %s FROM wds.agents a WHERE a.id = %s AND a.workspace_id = %s"
        " RETURNING id, agent_id, type, token, enabled",
        (type, new_channel_token(), agent_id, workspace_id),
    )
    return await cur.fetchone()


async def delete_channel(
    conn: Conn, *, workspace_id: int, agent_id: int, channel_id: int
) -> dict[str, Any] | None:
    cur = await conn.execute(
        "DELETE FROM wds.channels WHERE id = %s AND agent_id = %s AND workspace_id = %s RETURNING id",
        (channel_id, agent_id, workspace_id),
    )
    return await cur.fetchone()


async def channel_by_token(conn: Conn, *, token: str) -> dict[str, Any] | None:
    """The enabled channel with this token, with its agent's workspace (for the chat webhook)."""
    cur = await conn.execute(
        "SELECT c.id, c.workspace_id, c.agent_id, c.type, c.enabled FROM wds.channels c"
        " WHERE c.token = %s AND c.enabled",
        (token,),
    )
    return await cur.fetchone()
