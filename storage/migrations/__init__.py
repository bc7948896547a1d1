"""Versioned migrations of our own metadata, applied on start.

Each module ``mNNNN_<name>.py`` in this package defines ``upgrade(conn)`` taking a
SQLAlchemy connection inside a transaction. Applied versions are recorded in
``wds.schema_migrations``; a PostgreSQL advisory lock serialises concurrent starts of
several API and worker processes, so exactly one of them migrates.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from sqlalchemy import create_engine, text

_LOCK_KEY = 0x5744535F4D494752  # "WDS_MIGR"


def _migrations() -> list[tuple[int, str, ModuleType]]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("m") and info.name[1:5].isdigit():
            module = importlib.import_module(f"{__name__}.{info.name}")
            found.append((int(info.name[1:5]), info.name, module))
    found.sort()
    versions = [v for v, _, _ in found]
    if len(versions) != len(set(versions)):
        raise RuntimeError(f"duplicate migration numbers: {versions}")
    return found


def sqlalchemy_url(dsn: str) -> str:
    """psycopg DSN/URL → SQLAlchemy URL using the psycopg 3 driver."""
    for prefix in ("postgresql://", "postgres://"):
        if dsn.startswith(prefix):
            return "postgresql+psycopg://" + dsn[len(prefix):]
    return dsn


def migrate(dsn: str) -> list[str]:
    """Apply every pending migration; returns the names applied (empty when up to date)."""
    engine = create_engine(sqlalchemy_url(dsn), pool_pre_ping=True)
    applied: list[str] = []
    try:
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
            conn.execute(text("CREATE SCHEMA IF NOT EXISTS wds"))
            conn.execute(
                text(
                    "CREATE TABLE IF NOT EXISTS wds.schema_migrations ("
                    " version int PRIMARY KEY, name text NOT NULL,"
                    " applied_at timestamptz NOT NULL DEFAULT now())"
                )
            )
            done = {r[0] for r in conn.execute(text("SELECT version FROM wds.schema_migrations"))}
            for version, name, module in _migrations():
                if version in done:
                    continue
                module.upgrade(conn)
                conn.execute(
                    text("INSERT INTO wds.schema_migrations (version, name) VALUES (:v, :n)"),
                    {"v": version, "n": name},
                )
                applied.append(name)
    finally:
        engine.dispose()
    return applied
