"""Operations surface (issue #22 item 7): schedules re-check their token at every firing.

``wds.tokens.replaced_by``: the token a rotation issued in place of this one. A schedule
stores the id of the token that created (or last changed) it; at each firing it follows
this chain to the live successor and uses that token's *current* grants, so rotating a
token keeps its schedules firing while revoking it (or letting it expire) stops them.
"""

from __future__ import annotations

from sqlalchemy import Connection, text


def upgrade(conn: Connection) -> None:
    conn.execute(text("ALTER TABLE wds.tokens ADD COLUMN IF NOT EXISTS replaced_by bigint"))
