"""The SQL endpoint's answers are bounded in bytes: ``wds_sql.answer_too_large(size,
cap)`` (in the schema of ``wds_sql.concat_text``, usable by every role: the workspaces'
read-only roles call it) ends a statement with SQLSTATE 54W01 at the first row that
takes the page past the cap (storage/ddl.py, ``ANSWER_GUARD_FUNCTION_SQL``;
docs/decisions.md, "An SQL answer is bounded in bytes"). Running it again changes
nothing."""

from __future__ import annotations

from sqlalchemy import Connection

from storage import ddl


def upgrade(conn: Connection) -> None:
    for statement in ddl.ANSWER_GUARD_FUNCTION_SQL:
        conn.exec_driver_sql(statement)
