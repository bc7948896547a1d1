"""``||`` in the SQL endpoint's analytic queries is bounded by the text limit:
``wds_sql.concat_text(a, b)`` (in a schema of its own, usable by every role: the
workspaces' read-only roles call it) concatenates, and refuses a result longer than
1,000,000 characters with SQLSTATE 54000 instead of building it (storage/ddl.py,
``CONCAT_FUNCTION_SQL``; docs/decisions.md, "Concatenation in SQL is bounded").
Running it again changes nothing."""

from __future__ import annotations

from sqlalchemy import Connection

from storage import ddl


def upgrade(conn: Connection) -> None:
    for statement in ddl.CONCAT_FUNCTION_SQL:
        conn.exec_driver_sql(statement)
