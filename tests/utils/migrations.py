"""Running one migration's ``upgrade`` again on the scratch database, as Alembic would
(the upgrade tests of m0013, m0016, m0017: tables made before it, then upgraded twice)."""

from __future__ import annotations

from types import ModuleType

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
