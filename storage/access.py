"""Access profiles, grants and bearer tokens.

A token's secret is shown once; only its SHA-256 is stored (tokens are 256-bit random
strings, so a slow password hash adds nothing). A token belongs to one workspace and,
for rest_api and user_mcp, one access profile; rest_api tokens also get full access to
the tables they create; vibe_mcp (the builder credential) sees every table.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from enum import StrEnum
from typing import Any

from psycopg import AsyncConnection

Conn = AsyncConnection[Any]


class TokenType(StrEnum):
    REST_API = "rest_api"
    USER_MCP = "user_mcp"
    VIBE_MCP = "vibe_mcp"


class Action(StrEnum):
    READ = "read"
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"


_PREFIX = {TokenType.REST_API: "wds_rest_", TokenType.USER_MCP: "wds_mcp_", TokenType.VIBE_MCP: "wds_vibe_"}


@dataclass(frozen=True, slots=True)
class Perms:
    read: bool = False
    create: bool = False
    update: bool = False
    delete: bool = False

    def allows(self, action: Action) -> bool:
        return bool(getattr(self, action.value))

    def as_dict(self) -> dict[str, bool]:
        return {"read": self.read, "create": self.create, "update": self.update, "delete": self.delete}


FULL = Perms(True, True, True, True)
NONE = Perms()


@dataclass(frozen=True, slots=True)
class BucketPerms:
    """Rights on one authenticated bucket; ``all_paths`` frees app users from their prefix."""

    read: bool = False
    write: bool = False
    all_paths: bool = False

    def as_dict(self) -> dict[str, bool]:
        return {"read": self.read, "write": self.write, "all_paths": self.all_paths}


BUCKET_FULL = BucketPerms(True, True, True)
BUCKET_NONE = BucketPerms()


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the resolved token with its workspace state and table grants."""

    token_id: int
    workspace_id: int
    type: TokenType
    profile_id: int | None
    plan: str
    read_only: bool
    expires_at: datetime | None
    grants: dict[int, Perms] = field(default_factory=dict)
    # app-user sessions act through the relay profile; their user id (the id of their row
    # in the workspace's Users table, users_table_id) is kept for audit and confines them
    app_user_id: int | None = None
    users_table_id: int | None = None
    # authenticated buckets need a grant (m0009); the buckets a token created are its own
    bucket_grants: dict[int, BucketPerms] = field(default_factory=dict)

    @property
    def all_tables(self) -> bool:
        return self.type is TokenType.VIBE_MCP

    def perms(self, table_id: int) -> Perms:
        if self.all_tables:
            return FULL
        perms = self.grants.get(table_id, NONE)
        if self.own_row_only(table_id):
            # accounts are made by sign-up and removed by the workspace: an app user never
            # creates or deletes a profile row, and updates only its own (own_row_only)
            return Perms(perms.read, False, perms.update, False)
        return perms

    def own_row_only(self, table_id: int) -> bool:
        """Whether writes to ``table_id`` are confined to the caller's own record: an app
        user's on the workspace's Users table (docs/security.md)."""
        return self.app_user_id is not None and table_id == self.users_table_id

    def can(self, table_id: int, action: Action) -> bool:
        return self.perms(table_id).allows(action)

    def can_read(self, table_id: int) -> bool:
        return self.perms(table_id).read

    def bucket_perms(self, bucket_id: int) -> BucketPerms:
        if self.all_tables:
            return BUCKET_FULL
        return self.bucket_grants.get(bucket_id, BUCKET_NONE)

    def own_prefix(self, bucket_id: int) -> str | None:
        """The path prefix an app user is confined to in a bucket (``None``: not confined)."""
        if self.app_user_id is None or self.bucket_perms(bucket_id).all_paths:
            return None
        return f"users/{self.app_user_id}/"

    def may_read_object(self, bucket_id: int, public: bool, path: str | None = None) -> bool:
        """Read (list, download, sign, reference in a file cell) a bucket, at ``path`` if given.

        Public buckets are readable by every credential; app users stay in their prefix.
        """
        if not (public or self.bucket_perms(bucket_id).read):
            return False
        own = self.own_prefix(bucket_id)
        return own is None or path is None or path.startswith(own)


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret(token_type: TokenType) -> str:
    return _PREFIX[token_type] + secrets.token_urlsafe(32)


# --------------------------------------------------------------------------- profiles


async def create_profile(conn: Conn, *, workspace_id: int, name: str) -> dict[str, Any]:
    cur = await conn.execute(
        "INSERT INTO wds.access_profiles (workspace_id, name) VALUES (%s, %s) RETURNING *",
        (workspace_id, name),
    )
    row = await cur.fetchone()
    assert row is not None
    return row


async def get_profile(conn: Conn, *, workspace_id: int, profile_id: int) -> dict[str, Any] | None:
    cur = await conn.execute(
        "SELECT * FROM wds.access_profiles WHERE id = %s AND workspace_id = %s", (profile_id, workspace_id)
    )
    return await cur.fetchone()


async def list_profiles(conn: Conn, *, workspace_id: int) -> list[dict[str, Any]]:
    cur = await conn.execute(
        "SELECT * FROM wds.access_profiles WHERE workspace_id = %s ORDER BY id", (workspace_id,)
    )
    return await cur.fetchall()


async def set_grants(conn: Conn, *, profile_id: int, grants: list[tuple[int, Perms]]) -> None:
    """Replace a profile's grants."""
    await conn.execute("DELETE FROM wds.grants WHERE profile_id = %s", (profile_id,))
    for table_id, p in grants:
        await conn.execute(
            "INSERT INTO wds.grants (profile_id, table_id, can_read, can_create, can_update, can_delete)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (profile_id, table_id, p.read, p.create, p.update, p.delete),
        )


async def upsert_grant(conn: Conn, *, profile_id: int, table_id: int, perms: Perms) -> None:
    await conn.execute(
        "INSERT INTO wds.grants (profile_id, table_id, can_read, can_create, can_update, can_delete)"
        " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (profile_id, table_id) DO UPDATE SET"
        " can_read = excluded.can_read, can_create = excluded.can_create,"
        " can_update = excluded.can_update, can_delete = excluded.can_delete",
        (profile_id, table_id, perms.read, perms.create, perms.update, perms.delete),
    )


async def set_bucket_grants(conn: Conn, *, profile_id: int, grants: list[tuple[int, BucketPerms]]) -> None:
    """Replace a profile's bucket grants."""
    await conn.execute("DELETE FROM wds.bucket_grants WHERE profile_id = %s", (profile_id,))
    for bucket_id, p in grants:
        await upsert_bucket_grant(conn, profile_id=profile_id, bucket_id=bucket_id, perms=p)


async def upsert_bucket_grant(conn: Conn, *, profile_id: int, bucket_id: int, perms: BucketPerms) -> None:
    """Set one bucket grant; all-false removes it."""
    if perms == BUCKET_NONE:
        await conn.execute(
            "DELETE FROM wds.bucket_grants WHERE profile_id = %s AND bucket_id = %s", (profile_id, bucket_id)
        )
        return
    await conn.execute(
        "INSERT INTO wds.bucket_grants (profile_id, bucket_id, can_read, can_write, all_paths)"
        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (profile_id, bucket_id) DO UPDATE SET"
        " can_read = excluded.can_read, can_write = excluded.can_write, all_paths = excluded.all_paths",
        (profile_id, bucket_id, perms.read, perms.write, perms.all_paths),
    )


async def profile_bucket_grants(conn: Conn, *, profile_id: int) -> list[dict[str, Any]]:
    cur = await conn.execute(
        "SELECT g.bucket_id, b.name AS bucket, g.can_read AS read, g.can_write AS write, g.all_paths"
        " FROM wds.bucket_grants g JOIN wds.buckets b ON b.id = g.bucket_id"
        " WHERE g.profile_id = %s ORDER BY g.bucket_id",
        (profile_id,),
    )
    return await cur.fetchall()


# SQL fragment: a profile's bucket grants as a JSON array of [bucket, read, write, all_paths]
BUCKET_GRANTS_SQL = (
    "coalesce((SELECT jsonb_agg(jsonb_build_array(bg.bucket_id, bg.can_read, bg.can_write, bg.all_paths))"
    " FROM wds.bucket_grants bg WHERE bg.profile_id = {profile}), '[]')"
)


def bucket_grants_of(rows: list[list[Any]]) -> dict[int, BucketPerms]:
    return {int(r[0]): BucketPerms(bool(r[1]), bool(r[2]), bool(r[3])) for r in rows}


async def profile_grants(conn: Conn, *, profile_id: int) -> list[dict[str, Any]]:
    cur = await conn.execute(
        "SELECT table_id, can_read AS read, can_create AS create, can_update AS update,"
        " can_delete AS delete FROM wds.grants WHERE profile_id = %s ORDER BY table_id",
        (profile_id,),
    )
    return await cur.fetchall()


# --------------------------------------------------------------------------- tokens


async def create_token(
    conn: Conn,
    *,
    workspace_id: int,
    token_type: TokenType,
    name: str,
    profile_id: int | None,
    expires_in_seconds: int | None,
) -> tuple[dict[str, Any], str]:
    """Create a token; returns its row and the secret (the only time it is available)."""
    secret = new_secret(token_type)
    expires_at = (
        datetime.now(timezone.utc) + timedelta(seconds=expires_in_seconds) if expires_in_seconds else None
    )
    cur = await conn.execute(
        "INSERT INTO wds.tokens (workspace_id, profile_id, type, name, token_hash, prefix, expires_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING *",
        (workspace_id, profile_id, token_type.value, name, hash_token(secret), secret[:12], expires_at),
    )
    row = await cur.fetchone()
    assert row is not None
    return row, secret


async def rotate_token(conn: Conn, *, workspace_id: int, token_id: int) -> tuple[dict[str, Any], str] | None:
    """Issue a new secret with the same rights and revoke the old one. ``None`` for a
    token that is revoked or expired: rotating is not a way to bring one back."""
    cur = await conn.execute(
        "UPDATE wds.tokens SET revoked_at = now() WHERE id = %s AND workspace_id = %s AND revoked_at IS NULL"
        " AND (expires_at IS NULL OR expires_at > now()) RETURNING *",
        (token_id, workspace_id),
    )
    old = await cur.fetchone()
    if old is None:
        return None
    remaining = None
    if old["expires_at"] is not None:
        remaining = max(1, int((old["expires_at"] - datetime.now(timezone.utc)).total_seconds()))
    row, secret = await create_token(
        conn, workspace_id=workspace_id, token_type=TokenType(old["type"]), name=old["name"],
        profile_id=old["profile_id"], expires_in_seconds=remaining,
    )
    # schedules the old token made follow it to its successor (principal_by_token_id)
    await conn.execute("UPDATE wds.tokens SET replaced_by = %s WHERE id = %s", (row["id"], token_id))
    # tables and buckets the old token created stay with its successor
    await conn.execute(
        "INSERT INTO wds.token_tables (token_id, table_id) SELECT %s, table_id FROM wds.token_tables"
        " WHERE token_id = %s",
        (row["id"], token_id),
    )
    await conn.execute(
        "UPDATE wds.buckets SET created_by_token_id = %s WHERE created_by_token_id = %s", (row["id"], token_id)
    )
    return row, secret


async def revoke_token(conn: Conn, *, workspace_id: int, token_id: int) -> dict[str, Any] | None:
    cur = await conn.execute(
        "UPDATE wds.tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = %s AND workspace_id = %s"
        " RETURNING *",
        (token_id, workspace_id),
    )
    return await cur.fetchone()


async def list_tokens(conn: Conn, *, workspace_id: int) -> list[dict[str, Any]]:
    cur = await conn.execute(
        "SELECT id, type, name, prefix, profile_id, expires_at, revoked_at, last_used_at, created_at"
        " FROM wds.tokens WHERE workspace_id = %s ORDER BY id",
        (workspace_id,),
    )
    return await cur.fetchall()


async def grant_created_table(conn: Conn, *, token_id: int, table_id: int) -> None:
    await conn.execute(
        "INSERT INTO wds.token_tables (token_id, table_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        (token_id, table_id),
    )


_PRINCIPAL_SQL = (
    "SELECT t.id, t.workspace_id, t.type, t.profile_id, t.expires_at, w.plan, w.read_only,"
    " coalesce((SELECT jsonb_agg(jsonb_build_array(g.table_id, g.can_read, g.can_create,"
    "   g.can_update, g.can_delete)) FROM wds.grants g WHERE g.profile_id = t.profile_id), '[]')"
    "   AS grants,"
    " coalesce((SELECT jsonb_agg(tt.table_id) FROM wds.token_tables tt WHERE tt.token_id = t.id), '[]')"
    "   AS own_tables, "
    + BUCKET_GRANTS_SQL.format(profile="t.profile_id") + " AS bucket_grants,"
    " coalesce((SELECT jsonb_agg(b.id) FROM wds.buckets b WHERE b.created_by_token_id = t.id), '[]')"
    "   AS own_buckets"
    " FROM wds.tokens t JOIN wds.workspaces w ON w.id = t.workspace_id"
    " WHERE {where} AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())"
)


async def resolve_token(conn: Conn, *, secret: str) -> Principal | None:
    """Look a bearer secret up; ``None`` when unknown, revoked or expired.

    One round trip: the token, its workspace state and all its grants in one query.
    """
    cur = await conn.execute(_PRINCIPAL_SQL.replace("{where}", "t.token_hash = %s"), (hash_token(secret),))
    return _principal(await cur.fetchone())


async def principal_by_token_id(conn: Conn, *, token_id: int, follow_rotation: bool = True) -> Principal | None:
    """The live principal of a token by id, with its grants as they are now (schedule
    firings re-check their creator this way); a rotated token is followed to the token
    that replaced it. ``None`` when revoked (not by rotation) or expired."""
    if follow_rotation:
        cur = await conn.execute(
            "WITH RECURSIVE chain(id, depth) AS (SELECT %s::bigint, 0 UNION ALL"
            " SELECT t.replaced_by, c.depth + 1 FROM chain c JOIN wds.tokens t ON t.id = c.id"
            " WHERE t.replaced_by IS NOT NULL AND c.depth < 100)"
            " SELECT id FROM chain ORDER BY depth DESC LIMIT 1",
            (token_id,),
        )
        row = await cur.fetchone()
        if row is not None:
            token_id = row["id"]
    cur = await conn.execute(_PRINCIPAL_SQL.replace("{where}", "t.id = %s"), (token_id,))
    return _principal(await cur.fetchone())


def _principal(row: dict[str, Any] | None) -> Principal | None:
    if row is None:
        return None
    grants = {g[0]: Perms(g[1], g[2], g[3], g[4]) for g in row["grants"]}
    for table_id in row["own_tables"]:
        grants[table_id] = FULL
    buckets = bucket_grants_of(row["bucket_grants"])
    for bucket_id in row["own_buckets"]:
        buckets[bucket_id] = BUCKET_FULL
    return Principal(
        token_id=row["id"],
        workspace_id=row["workspace_id"],
        type=TokenType(row["type"]),
        profile_id=row["profile_id"],
        plan=row["plan"],
        read_only=row["read_only"],
        expires_at=row["expires_at"],
        grants=grants,
        bucket_grants=buckets,
    )


async def touch_tokens(conn: Conn, *, token_ids: list[int]) -> None:
    """Record use (``last_used_at``), batched off the request path."""
    if token_ids:
        await conn.execute(
            "UPDATE wds.tokens SET last_used_at = now() WHERE id = ANY(%s)", (token_ids,)
        )
