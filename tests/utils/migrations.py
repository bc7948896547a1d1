"""Running one migration's ``upgrade`` again on the scratch database, as Alembic would
(the upgrade tests of m0013, m0016, m0017, m0022: tables made before it, then upgraded
twice), and what a table looks like before and after."""

from __future__ import annotations

from types import ModuleType

import psycopg
from psycopg import sql
from sqlalchemy import create_engine

from storage.migrations import sqlalchemy_url


def run_upgrade(dsn: str, migration: ModuleType) -> None:
    """``migration.upgrade`` in one transaction on ``dsn``."""
    engine = create_engine(sqlalchemy_url(dsn))
    try:
        with engine.begin() as conn:
            migration.upgrade(conn)
    finally:
        engine.dispose()


def indexes_and_rows(dsn: str, ws_id: int, table_id: int) -> tuple[dict[str, str], list[tuple]]:
    """A data table's indexes (name → definition) and its rows, in id order."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        indexes = dict(conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = %s",
            (f"ws_{ws_id}", f"t_{table_id}")).fetchall())
        rows = conn.execute(sql.SQL("SELECT * FROM {}.{} ORDER BY id").format(
            sql.Identifier(f"ws_{ws_id}"), sql.Identifier(f"t_{table_id}"))).fetchall()
    return indexes, rows
