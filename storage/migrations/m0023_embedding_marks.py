"""Where the embeddings keeper is in each workspace's change log (docs/decisions.md,
"Every writer's records are embedded"): ``wds.embedding_marks`` holds, per workspace and
embeddings model (``provider/model``: API processes configured for another model keep
their own tables), the last ``wds.events`` seq whose records' embeddings were brought up
to date. A workspace gets its row when semantic search is turned on for one of its
tables, or when the keeper first meets it (at the log's end then: the records written
before are the backfill's, which the keeper starts then). Running it again changes
nothing."""

from __future__ import annotations

from sqlalchemy import Connection, text


def upgrade(conn: Connection) -> None:
    conn.execute(text(
        "CREATE TABLE IF NOT EXISTS wds.embedding_marks ("
        " workspace_id bigint NOT NULL REFERENCES wds.workspaces (id) ON DELETE CASCADE,"
        " embedder text NOT NULL, seq bigint NOT NULL, PRIMARY KEY (workspace_id, embedder))"))
