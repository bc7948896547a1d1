"""Metadata tables (SQLModel), all in the ``wds`` schema.

These models are the single description of our own metadata. Migrations
(``storage/migrations``) create them; the hot path reads them with plain SQL through
psycopg because an ORM session per request costs more than the request itself.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Column, DateTime, ForeignKey, Index, LargeBinary, UniqueConstraint, func, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, SQLModel

SCHEMA = "wds"


def _ts(nullable: bool = False, default: bool = True) -> Any:
    return Field(
        default=None,
        sa_column=Column(
            DateTime(timezone=True), nullable=nullable, server_default=func.now() if default else None
        ),
    )


def _json(default: str = "'{}'::jsonb") -> Any:
    return Field(default=None, sa_column=Column(JSONB, nullable=False, server_default=text(default)))


def _d(value: Any) -> Any:
    """A field whose default also exists server-side, so plain SQL inserts may omit it."""
    if isinstance(value, bool):
        sd = "true" if value else "false"
    elif isinstance(value, int):
        sd = str(value)
    else:
        sd = f"'{value}'"
    return Field(default=value, sa_column_kwargs={"server_default": text(sd)})


def _pk() -> Any:
    return Field(default=None, sa_column=Column(BigInteger, primary_key=True, autoincrement=True))


def _fk(target: str, *, nullable: bool = False, ondelete: str = "CASCADE") -> Any:
    return Field(
        default=None,
        sa_column=Column(BigInteger, ForeignKey(f"{SCHEMA}.{target}", ondelete=ondelete), nullable=nullable),
    )


class Workspace(SQLModel, table=True):
    __tablename__ = "workspaces"
    __table_args__ = {"schema": SCHEMA}
    id: int | None = _pk()
    name: str
    plan: str = _d("free")
    read_only: bool = _d(False)
    auto_recharge: bool = _d(False)
    relay_profile_id: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    # Users columns an app user may fill at sign-up (m0009): none unless the workspace says so
    signup_fields: list[str] | None = _json("'[]'::jsonb")
    event_seq: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))
    created_at: datetime | None = _ts()
    updated_at: datetime | None = _ts()


class TableDef(SQLModel, table=True):
    __tablename__ = "tables"
    __table_args__ = (UniqueConstraint("workspace_id", "name"), {"schema": SCHEMA})
    id: int | None = _pk()
    workspace_id: int = _fk("workspaces.id")
    name: str
    icon: str | None = None
    semantic: dict[str, Any] | None = Field(default=None, sa_column=Column(JSONB, nullable=True))
    created_by_token_id: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    created_at: datetime | None = _ts()
    updated_at: datetime | None = _ts()


class ColumnDef(SQLModel, table=True):
    __tablename__ = "columns"
    __table_args__ = (UniqueConstraint("table_id", "name"), {"schema": SCHEMA})
    id: int | None = _pk()
    workspace_id: int = _fk("workspaces.id")
    table_id: int = _fk("tables.id")
    name: str
    type: str
    required: bool = _d(False)
    position: int = _d(0)
    options: list[Any] | None = _json("'[]'::jsonb")
    config: dict[str, Any] | None = _json()
    formula: str | None = None
    relation_table_id: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    relation_label_column_id: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    # set when a column this computed column read was deleted with force (m0007)
    broken: str | None = None
    created_at: datetime | None = _ts()
    updated_at: datetime | None = _ts()


class AccessProfile(SQLModel, table=True):
    """The spec's "MCP Server": a named permission set granted tables."""

    __tablename__ = "access_profiles"
    __table_args__ = (UniqueConstraint("workspace_id", "name"), {"schema": SCHEMA})
    id: int | None = _pk()
    workspace_id: int = _fk("workspaces.id")
    name: str
    created_at: datetime | None = _ts()


class Grant(SQLModel, table=True):
    __tablename__ = "grants"
    __table_args__ = {"schema": SCHEMA}
    profile_id: int = Field(default=None, primary_key=True, sa_type=BigInteger, foreign_key=f"{SCHEMA}.access_profiles.id", ondelete="CASCADE")
    table_id: int = Field(default=None, primary_key=True, sa_type=BigInteger, foreign_key=f"{SCHEMA}.tables.id", ondelete="CASCADE")
    can_read: bool = _d(True)
    can_create: bool = _d(False)
    can_update: bool = _d(False)
    can_delete: bool = _d(False)


class BucketGrant(SQLModel, table=True):
    """A profile's rights on one authenticated bucket (m0009); ``all_paths`` lets app users
    acting through the profile past their own ``users/<id>/`` prefix."""

    __tablename__ = "bucket_grants"
    __table_args__ = {"schema": SCHEMA}
    profile_id: int = Field(default=None, primary_key=True, sa_type=BigInteger, foreign_key=f"{SCHEMA}.access_profiles.id", ondelete="CASCADE")
    bucket_id: int = Field(default=None, primary_key=True, sa_type=BigInteger, foreign_key=f"{SCHEMA}.buckets.id", ondelete="CASCADE")
    can_read: bool = _d(True)
    can_write: bool = _d(False)
    all_paths: bool = _d(False)


class Token(SQLModel, table=True):
    __tablename__ = "tokens"
    __table_args__ = {"schema": SCHEMA}
    id: int | None = _pk()
    workspace_id: int = _fk("workspaces.id")
    profile_id: int | None = _fk("access_profiles.id", nullable=True, ondelete="SET NULL")
    type: str
    name: str
    token_hash: str = Field(unique=True)
    prefix: str
    expires_at: datetime | None = _ts(nullable=True, default=False)
    revoked_at: datetime | None = _ts(nullable=True, default=False)
    last_used_at: datetime | None = _ts(nullable=True, default=False)
    created_at: datetime | None = _ts()
    # added by m0014: the token a rotation issued in its place (schedules follow it)
    replaced_by: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))


class TokenTable(SQLModel, table=True):
    """Tables a rest_api token created: it has full access to them."""

    __tablename__ = "token_tables"
    __table_args__ = {"schema": SCHEMA}
    token_id: int = Field(default=None, primary_key=True, sa_type=BigInteger, foreign_key=f"{SCHEMA}.tokens.id", ondelete="CASCADE")
    table_id: int = Field(default=None, primary_key=True, sa_type=BigInteger, foreign_key=f"{SCHEMA}.tables.id", ondelete="CASCADE")


class View(SQLModel, table=True):
    __tablename__ = "views"
    __table_args__ = {"schema": SCHEMA}
    id: int | None = _pk()
    workspace_id: int = _fk("workspaces.id")
    table_id: int = _fk("tables.id")
    name: str
    view_type: str
    config: dict[str, Any] | None = _json()
    share_id: str | None = Field(default=None, unique=True)
    published: str | None = None  # None | "view" | "form"
    created_at: datetime | None = _ts()
    updated_at: datetime | None = _ts()


class Agent(SQLModel, table=True):
    __tablename__ = "agents"
    __table_args__ = {"schema": SCHEMA}
    id: int | None = _pk()
    workspace_id: int = _fk("workspaces.id")
    name: str
    instructions: str = _d("")
    model: str | None = None
    table_ids: list[Any] | None = _json("'[]'::jsonb")
    config: dict[str, Any] | None = _json()
    created_at: datetime | None = _ts()
    updated_at: datetime | None = _ts()


class Channel(SQLModel, table=True):
    """A public chat channel of an agent; its token is public by design (spec: Agent chat)."""

    __tablename__ = "channels"
    __table_args__ = {"schema": SCHEMA}
    id: int | None = _pk()
    workspace_id: int = _fk("workspaces.id")
    agent_id: int = _fk("agents.id")
    type: str
    token: str = Field(unique=True)
    enabled: bool = _d(True)
    config: dict[str, Any] | None = _json()
    created_at: datetime | None = _ts()
    webhook_secret_hash: str | None = None  # added by m0008: sha256 of the Telegram secret_token


class Credential(SQLModel, table=True):
    __tablename__ = "credentials"
    __table_args__ = (UniqueConstraint("workspace_id", "name"), {"schema": SCHEMA})
    id: int | None = _pk()
    workspace_id: int = _fk("workspaces.id")
    name: str
    type: str
    header_name: str | None = None
    secret_enc: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    created_at: datetime | None = _ts()
    hosts: list[str] | None = _json("'[]'::jsonb")  # added by m0008: host patterns it may be sent to


class UsageEvent(SQLModel, table=True):
    __tablename__ = "usage"
    __table_args__ = (Index("usage_ws_time", "workspace_id", "created_at"), {"schema": SCHEMA})
    id: int | None = _pk()
    workspace_id: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    token_id: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    door: str = _d("rest")
    method: str
    route: str
    status: int
    duration_ms: float
    created_at: datetime | None = _ts()


class ChatMessage(SQLModel, table=True):
    __tablename__ = "chat_messages"
    __table_args__ = (Index("chat_session", "channel_id", "session_id", "id"), {"schema": SCHEMA})
    id: int | None = _pk()
    workspace_id: int = _fk("workspaces.id")
    channel_id: int = _fk("channels.id")
    session_id: str
    role: str
    content: str = _d("")
    tool_calls: list[Any] | None = _json("'[]'::jsonb")
    created_at: datetime | None = _ts()


class Schedule(SQLModel, table=True):
    __tablename__ = "schedules"
    __table_args__ = {"schema": SCHEMA}
    id: int | None = _pk()
    workspace_id: int = _fk("workspaces.id")
    table_id: int = _fk("tables.id")
    name: str
    spec: dict[str, Any] | None = _json()
    paused: bool = _d(False)
    created_at: datetime | None = _ts()


class Run(SQLModel, table=True):
    """A bulk run (run-actions, schedules, backfills) and its progress."""

    __tablename__ = "runs"
    __table_args__ = {"schema": SCHEMA}
    id: str = Field(primary_key=True)
    workspace_id: int = _fk("workspaces.id")
    table_id: int = _fk("tables.id")
    kind: str = _d("run_actions")
    status: str = _d("running")
    total: int = _d(0)
    done: int = _d(0)
    failed: int = _d(0)
    workflow_id: str | None = None
    errors: dict[str, Any] | None = _json()
    created_at: datetime | None = _ts()
    updated_at: datetime | None = _ts()
    # a backfill's computed columns (ids), so a newer backfill can take them over (m0012)
    column_ids: list[int] | None = Field(default=None, sa_column=Column(JSONB, nullable=True))


class Bucket(SQLModel, table=True):
    __tablename__ = "buckets"
    __table_args__ = (UniqueConstraint("workspace_id", "name"), {"schema": SCHEMA})
    id: int | None = _pk()
    workspace_id: int = _fk("workspaces.id")
    name: str
    public: bool = _d(False)
    # the rest_api token that created it has full access, as to its tables (m0009)
    created_by_token_id: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    created_at: datetime | None = _ts()


class StoredObject(SQLModel, table=True):
    __tablename__ = "objects"
    __table_args__ = (UniqueConstraint("bucket_id", "path"), {"schema": SCHEMA})
    id: int | None = _pk()
    workspace_id: int = _fk("workspaces.id")
    bucket_id: int = _fk("buckets.id")
    path: str
    size: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))
    content_type: str = _d("application/octet-stream")
    created_at: datetime | None = _ts()


class AppRefreshToken(SQLModel, table=True):
    __tablename__ = "app_refresh_tokens"
    __table_args__ = {"schema": SCHEMA}
    id: int | None = _pk()
    workspace_id: int = _fk("workspaces.id")
    user_id: int = Field(sa_type=BigInteger)
    token_hash: str = Field(unique=True)
    expires_at: datetime | None = _ts(nullable=False, default=False)
    revoked_at: datetime | None = _ts(nullable=True, default=False)
    created_at: datetime | None = _ts()
    family_id: str | None = None  # added by m0006: rotation family (reuse revokes it)


class AppUser(SQLModel, table=True):
    """An app user's sign-in identity (m0006); the profile row lives in the Users table."""

    __tablename__ = "app_users"
    __table_args__ = (UniqueConstraint("workspace_id", "email"), {"schema": SCHEMA})
    id: int | None = _pk()
    workspace_id: int = _fk("workspaces.id")
    table_id: int = Field(sa_type=BigInteger)
    record_id: int = Field(sa_type=BigInteger)
    email: str
    password_hash: str
    created_at: datetime | None = _ts()


class EventHorizon(SQLModel, table=True):
    """The highest purged realtime event seq per workspace (m0006)."""

    __tablename__ = "event_horizon"
    __table_args__ = {"schema": SCHEMA}
    workspace_id: int = Field(default=None, primary_key=True, sa_type=BigInteger)
    purged_through: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))


class Outbox(SQLModel, table=True):
    """Pipelines committed while Temporal was unreachable, started later by the relay."""

    __tablename__ = "outbox"
    __table_args__ = {"schema": SCHEMA}
    id: int | None = _pk()
    workspace_id: int = _fk("workspaces.id")
    table_id: int = _fk("tables.id")
    payload: dict[str, Any] | None = _json()
    created_at: datetime | None = _ts()
    started_at: datetime | None = _ts(nullable=True, default=False)


class IdempotencyKey(SQLModel, table=True):
    __tablename__ = "idempotency_keys"
    __table_args__ = {"schema": SCHEMA}
    token_id: int = Field(default=None, primary_key=True, sa_type=BigInteger)
    key: str = Field(primary_key=True)
    request_hash: str
    status: int = _d(0)
    response: dict[str, Any] | None = Field(default=None, sa_column=Column(JSONB, nullable=True))
    created_at: datetime | None = _ts()


class ChangeEvent(SQLModel, table=True):
    """Retained row-change events for realtime resume (``since=<seq>``)."""

    __tablename__ = "events"
    __table_args__ = {"schema": SCHEMA}
    workspace_id: int = Field(default=None, primary_key=True, sa_type=BigInteger)
    seq: int = Field(default=None, primary_key=True, sa_type=BigInteger)
    table_id: int = Field(sa_type=BigInteger)
    event: str
    record: dict[str, Any] | None = Field(default=None, sa_column=Column(JSONB, nullable=True))
    old_record: dict[str, Any] | None = Field(default=None, sa_column=Column(JSONB, nullable=True))
    created_at: datetime | None = _ts()


class QuotaCounter(SQLModel, table=True):
    __tablename__ = "quota_counters"
    __table_args__ = {"schema": SCHEMA}
    workspace_id: int = Field(default=None, primary_key=True, sa_type=BigInteger)
    month: str = Field(primary_key=True)  # "2026-11"
    kind: str = Field(primary_key=True)
    used: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))
