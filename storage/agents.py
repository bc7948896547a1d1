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

Settings the agent chat reads (:mod:`api.doors.chat`), decided here:

- ``agent.config = {write, delete}``: ``write`` lets the agent create and update records
  of its tables, ``delete`` also lets it delete them (only together with ``write``, as
  :func:`api.doors.chat.tools.agent_perms` applies it). Both default to ``false``.
- ``channel.config = {credential}``: for messaging channels, the name of a stored
  credential of the workspace (:mod:`storage.secrets`) holding the bot token. It must
  exist when it is set; a credential deleted later makes the channel answer 503 until
  it is set again. Web channels take no credential.
- Updates merge: only the keys sent change, ``null`` clears a key (back to its
  default), and ``config: null`` or ``{}`` changes nothing. Outputs show every key,
  normalised (``{write: false, delete: false}``, ``{credential: null}``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Collection, Mapping
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from storage.errors import ValidationError
from storage.secrets import load_secret
from storage.values import iso

Conn = AsyncConnection[Any]

CHANNEL_TYPES = ("web", "telegram", "slack", "whatsapp")
PUBLIC_TOKEN_TYPES = frozenset({"web"})
CHANNEL_TOKEN_PREFIX = "wds_chan_"
MAX_NAME = 255
MAX_INSTRUCTIONS = 100_000
MAX_MODEL = 200
MAX_TABLES = 500
MAX_CREDENTIAL_NAME = 255
AGENT_CONFIG_KEYS = ("write", "delete")
CHANNEL_CONFIG_KEYS = ("credential",)


def new_channel_token() -> str:
    """A fresh channel token: the prefix and 192 random bits."""
    return CHANNEL_TOKEN_PREFIX + secrets.token_urlsafe(24)


# --------------------------------------------------------------------------- validation


def clean_agent_fields(
    fields: Mapping[str, Any], *, workspace_table_ids: Collection[int], creating: bool
) -> dict[str, Any]:
    """Check agent fields; returns the subset to store, normalised.

    Args:
        fields: any of ``name``, ``instructions``, ``model``, ``table_ids``, ``config``
            (``{write?, delete?}``: booleans, ``null`` clears; see the module notes).
        workspace_table_ids: ids of the workspace's tables (``table_ids`` must be among them).
        creating: ``name`` is then required.

    Raises:
        ValidationError: an unknown key, a missing or empty name, a value of the wrong
            type or size, a table id that is not a table of the workspace.
    """
    unknown = sorted(set(fields) - {"name", "instructions", "model", "table_ids", "config"})
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
    if fields.get("config") is not None:
        config = clean_agent_config(fields["config"])
        if creating:  # nothing to clear yet: a null is just the default
            config = {k: v for k, v in config.items() if v is not None}
        if config:
            out["config"] = config
    return out


def clean_agent_config(value: Any) -> dict[str, bool | None]:
    """Check an agent ``config``; returns the keys sent (``None``: clear the key).

    Raises:
        ValidationError: not an object, an unknown key, a value that is not a boolean or null.
    """
    return _clean_config(value, "agent", AGENT_CONFIG_KEYS, _bool_setting)


def _bool_setting(key: str, value: Any) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise ValidationError(f"config.{key} must be true, false or null")
    return value


def _clean_config(
    value: Any, what: str, keys: tuple[str, ...], check: Callable[[str, Any], Any]
) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValidationError(f"{what} config must be an object")
    unknown = sorted(str(k) for k in set(value) - set(keys))
    if unknown:
        raise ValidationError(f"unknown {what} config key(s): {', '.join(unknown)} (known: {', '.join(keys)})")
    return {k: check(k, v) for k, v in value.items()}


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


def clean_channel_config(value: Any, *, channel_type: str) -> dict[str, str | None]:
    """Check a channel ``config`` (without the credential lookup, see :func:`update_channel`);
    returns the keys sent (``None``: clear the key).

    Raises:
        ValidationError: not an object, an unknown key, a credential name that is not a
            non-empty string of at most 255 characters, a credential on a web channel.
    """

    def credential(key: str, name: Any) -> str | None:
        if name is None:
            return None
        if not isinstance(name, str) or not name.strip() or len(name.strip()) > MAX_CREDENTIAL_NAME:
            raise ValidationError(
                f"config.credential must be the name of a stored credential ({MAX_CREDENTIAL_NAME} characters at"
                " most), or null")
        if channel_type in PUBLIC_TOKEN_TYPES:
            raise ValidationError("config.credential applies to messaging channels (telegram, slack, whatsapp)")
        return name.strip()

    return _clean_config(value, "channel", CHANNEL_CONFIG_KEYS, credential)


# --------------------------------------------------------------------------- output


def channel_out(channel: Mapping[str, Any], *, reveal: bool = False) -> dict[str, Any]:
    """A channel as listed; the token only for web channels unless ``reveal`` (creation)."""
    shown = reveal or channel["type"] in PUBLIC_TOKEN_TYPES
    return {
        "id": channel["id"],
        "type": channel["type"],
        "token": channel["token"] if shown else None,
        "enabled": channel["enabled"],
        "config": {"credential": (channel.get("config") or {}).get("credential")},
    }


def agent_out(row: Mapping[str, Any]) -> dict[str, Any]:
    """The API shape of an agent row from :func:`list_agents` / :func:`get_agent`."""
    return {
        "id": row["id"],
        "name": row["name"],
        "instructions": row["instructions"],
        "model": row["model"],
        "table_ids": row["table_ids"],
        "config": {k: (row.get("config") or {}).get(k) is True for k in AGENT_CONFIG_KEYS},
        "channels": [channel_out(c) for c in row["channels"]],
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }


# --------------------------------------------------------------------------- persistence

# One statement for agents with their live table ids and their channels (tokens
# included: callers decide what to show through agent_out).
_SELECT = (
    "SELECT a.id, a.workspace_id, a.name, a.instructions, a.model, a.config, a.created_at, a.updated_at,"
    " (SELECT coalesce(jsonb_agg(x.v ORDER BY x.n), '[]'::jsonb)"
    "    FROM jsonb_array_elements(a.table_ids) WITH ORDINALITY AS x(v, n)"
    "    JOIN wds.tables t ON t.id = (x.v)::bigint AND t.workspace_id = a.workspace_id) AS table_ids,"
    " (SELECT coalesce(jsonb_agg(jsonb_build_object('id', c.id, 'type', c.type, 'token', c.token,"
    "    'enabled', c.enabled, 'config', c.config) ORDER BY c.id), '[]'::jsonb)"
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
    config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Insert an agent (fields from :func:`clean_agent_fields`); returns it as :func:`get_agent`."""
    settings = {k: v for k, v in (config or {}).items() if v is not None}
    cur = await conn.execute(
        "INSERT INTO wds.agents (workspace_id, name, instructions, model, table_ids, config)"
        " VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
        (workspace_id, name, instructions, model, Jsonb(table_ids or []), Jsonb(settings)),
    )
    row = await cur.fetchone()
    assert row is not None
    agent = await get_agent(conn, workspace_id=workspace_id, agent_id=row["id"])
    assert agent is not None
    return agent


def _merge_sql(column: str, config: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """``column = (column || sent) - cleared``: the merge of a cleaned config (None clears)."""
    sent = {k: v for k, v in config.items() if v is not None}
    cleared = [k for k, v in config.items() if v is None]
    return f"{column} = ({column} || %s) - %s::text[]", [Jsonb(sent), cleared]


async def update_agent(
    conn: Conn, *, workspace_id: int, agent_id: int, changes: Mapping[str, Any]
) -> dict[str, Any] | None:
    """Apply cleaned ``changes``; the agent as :func:`get_agent`, ``None`` if absent.

    ``config`` merges into the stored settings: only the keys sent change, ``None`` clears one.
    """
    sets: list[str] = []
    params: list[Any] = []
    for key, value in changes.items():
        if key in ("name", "instructions", "model"):
            sets.append(f"{key} = %s")
            params.append(value)
        elif key == "table_ids":
            sets.append("table_ids = %s")
            params.append(Jsonb(value))
        elif key == "config":
            sql, values = _merge_sql("config", value)
            sets.append(sql)
            params.extend(values)
    cur = await conn.execute(
        f"UPDATE wds.agents SET {''.join(s + ', ' for s in sets)}updated_at = now()"
        " WHERE id = %s AND workspace_id = %s RETURNING id",
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


# --------------------------------------------------------------------------- channels

_CHANNEL_COLS = "id, agent_id, type, token, enabled, config, created_at"


async def _check_credential(conn: Conn, workspace_id: int, config: Mapping[str, Any]) -> None:
    name = config.get("credential")
    if name is not None and await load_secret(conn, workspace_id=workspace_id, name=name) is None:
        raise ValidationError(f"config.credential: no stored credential named {name!r} in this workspace")


async def list_channels(conn: Conn, *, workspace_id: int, agent_id: int | None = None) -> list[dict[str, Any]]:
    """Channels of the workspace (or of one agent), tokens included: show them through :func:`channel_out`."""
    cur = await conn.execute(
        f"SELECT {_CHANNEL_COLS} FROM wds.channels"
        " WHERE workspace_id = %s AND (%s::bigint IS NULL OR agent_id = %s) ORDER BY id",
        (workspace_id, agent_id, agent_id),
    )
    return await cur.fetchall()


async def get_channel(
    conn: Conn, *, workspace_id: int, channel_id: int, agent_id: int | None = None
) -> dict[str, Any] | None:
    """One channel of the workspace (and of ``agent_id`` when given); ``None`` if absent."""
    cur = await conn.execute(
        f"SELECT {_CHANNEL_COLS} FROM wds.channels"
        " WHERE id = %s AND workspace_id = %s AND (%s::bigint IS NULL OR agent_id = %s)",
        (channel_id, workspace_id, agent_id, agent_id),
    )
    return await cur.fetchone()


async def create_channel(
    conn: Conn,
    *,
    workspace_id: int,
    agent_id: int,
    type: str,
    config: Mapping[str, Any] | None = None,
    enabled: bool = True,
) -> dict[str, Any] | None:
    """Add a channel with a fresh token to an agent; ``None`` when the agent is absent.

    Raises:
        ValidationError: a bad ``config`` (see :func:`clean_channel_config`), a credential
            the workspace does not have, ``enabled`` not a boolean.
    """
    if not isinstance(enabled, bool):
        raise ValidationError("enabled must be true or false")
    settings = {k: v for k, v in clean_channel_config(config or {}, channel_type=type).items() if v is not None}
    await _check_credential(conn, workspace_id, settings)
    cur = await conn.execute(
        "INSERT INTO wds.channels (workspace_id, agent_id, type, token, enabled, config)"
        " SELECT a.workspace_id, a.id, %s, %s, %s, %s FROM wds.agents a WHERE a.id = %s AND a.workspace_id = %s"
        f" RETURNING {_CHANNEL_COLS}",
        (type, new_channel_token(), enabled, Jsonb(settings), agent_id, workspace_id),
    )
    return await cur.fetchone()


async def update_channel(
    conn: Conn,
    *,
    workspace_id: int,
    agent_id: int,
    channel_id: int,
    enabled: bool | None = None,
    config: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Turn a channel on or off and/or merge ``config`` into its settings.

    ``enabled=None`` leaves it as is; ``config`` merges as for agents (only the keys
    sent change, ``None`` clears one). A disabled channel's token answers 404 at once.

    Returns:
        The channel row, ``None`` when the agent has no such channel.

    Raises:
        ValidationError: as :func:`create_channel`.
    """
    if enabled is not None and not isinstance(enabled, bool):
        raise ValidationError("enabled must be true or false")
    channel = await get_channel(conn, workspace_id=workspace_id, channel_id=channel_id, agent_id=agent_id)
    if channel is None:
        return None
    changes = clean_channel_config(config or {}, channel_type=channel["type"])
    await _check_credential(conn, workspace_id, changes)
    merge, params = _merge_sql("config", changes)
    cur = await conn.execute(
        f"UPDATE wds.channels SET enabled = coalesce(%s, enabled), {merge}"
        f" WHERE id = %s AND agent_id = %s AND workspace_id = %s RETURNING {_CHANNEL_COLS}",
        (enabled, *params, channel_id, agent_id, workspace_id),
    )
    return await cur.fetchone()


async def rotate_channel_token(
    conn: Conn, *, workspace_id: int, agent_id: int, channel_id: int
) -> dict[str, Any] | None:
    """Give a channel a fresh token; the old one stops working at once (``None``: no such channel).

    Show the new token through ``channel_out(row, reveal=True)``: this is its only showing
    for a messaging channel.
    """
    cur = await conn.execute(
        "UPDATE wds.channels SET token = %s WHERE id = %s AND agent_id = %s AND workspace_id = %s"
        f" RETURNING {_CHANNEL_COLS}",
        (new_channel_token(), channel_id, agent_id, workspace_id),
    )
    return await cur.fetchone()


async def set_webhook_secret(conn: Conn, *, workspace_id: int, channel_id: int, secret_hash: str | None) -> None:
    """Store the SHA-256 (hex) of the secret a messaging platform sends back with each update."""
    await conn.execute(
        "UPDATE wds.channels SET webhook_secret_hash = %s WHERE id = %s AND workspace_id = %s",
        (secret_hash, channel_id, workspace_id),
    )


async def delete_channel(
    conn: Conn, *, workspace_id: int, agent_id: int, channel_id: int
) -> dict[str, Any] | None:
    cur = await conn.execute(
        "DELETE FROM wds.channels WHERE id = %s AND agent_id = %s AND workspace_id = %s RETURNING id",
        (channel_id, agent_id, workspace_id),
    )
    return await cur.fetchone()

