"""App-user sign-up fields and per-bucket grants (issue 22).

* ``wds.workspaces.signup_fields``: the Users columns an app user may fill at sign-up
  (a JSON array of column names; empty — nothing but e-mail and password — by default);
* ``wds.bucket_grants``: per access profile, read / write on one bucket, and ``all_paths``
  for app users acting through it (otherwise they reach only ``users/<their id>/``).
  Authenticated buckets answer only tokens with a grant (the builder token excepted);
* ``wds.buckets.created_by_token_id``: the token that created a bucket keeps full access
  to it, as to the tables it creates.
"""

from __future__ import annotations

from sqlalchemy import Connection, text
from sqlmodel import SQLModel

import storage.models as m


def upgrade(conn: Connection) -> None:
    conn.execute(
        text("ALTER TABLE wds.workspaces ADD COLUMN IF NOT EXISTS signup_fields jsonb NOT NULL DEFAULT '[]'::jsonb")
    )
    conn.execute(text("ALTER TABLE wds.buckets ADD COLUMN IF NOT EXISTS created_by_token_id bigint"))
    SQLModel.metadata.create_all(conn, tables=[m.BucketGrant.__table__])
    conn.execute(text("CREATE INDEX IF NOT EXISTS bucket_grants_bucket ON wds.bucket_grants (bucket_id)"))
