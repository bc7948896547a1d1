"""The initial metadata schema: every table of storage/models.py as first released."""

from __future__ import annotations

from sqlalchemy import Connection, text
from sqlmodel import SQLModel

import storage.models as m

TABLES = [
    m.Workspace, m.TableDef, m.ColumnDef, m.AccessProfile, m.Grant, m.Token, m.TokenTable,
    m.View, m.Agent, m.Channel, m.Credential, m.UsageEvent, m.ChatMessage, m.Schedule, m.Run,
    m.Bucket, m.StoredObject, m.AppRefreshToken, m.Outbox, m.IdempotencyKey, m.ChangeEvent,
    m.QuotaCounter,
]


def upgrade(conn: Connection) -> None:
    conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
    SQLModel.metadata.create_all(conn, tables=[t.__table__ for t in TABLES])
    conn.execute(text("CREATE INDEX IF NOT EXISTS columns_table ON wds.columns (table_id, position)"))
    conn.execute(text("CREATE INDEX IF NOT EXISTS tables_ws ON wds.tables (workspace_id)"))
    conn.execute(text("CREATE INDEX IF NOT EXISTS tokens_ws ON wds.tokens (workspace_id)"))
    conn.execute(text("CREATE INDEX IF NOT EXISTS events_time ON wds.events (created_at)"))
    conn.execute(text("CREATE INDEX IF NOT EXISTS idem_time ON wds.idempotency_keys (created_at)"))
