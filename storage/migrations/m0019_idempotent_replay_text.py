"""An idempotent replay is the first answer byte for byte: ``wds.idempotency_keys.response``
becomes ``json`` (the text as written) instead of ``jsonb``, which reorders an object's
keys (shorter keys first): a replayed record had its fields, and ``pipeline`` and its keys,
in another order than the first answer. Rows already stored (kept 24 hours) keep jsonb's
order."""

from __future__ import annotations

from sqlalchemy import Connection, text


def upgrade(conn: Connection) -> None:
    conn.execute(text("ALTER TABLE wds.idempotency_keys ALTER COLUMN response TYPE json USING response::json"))
