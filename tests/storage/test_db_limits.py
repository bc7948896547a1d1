"""A statement that fails on one of PostgreSQL's program limits (SQLSTATE class 54) is the
client's request being too large or complex: 400 ``DATABASE_LIMIT_EXCEEDED``, never the
503 "connection lost" of a real connection failure (psycopg files class 54 under
``OperationalError``), and the connection stays usable."""

from __future__ import annotations

import os

import pytest

from storage.db import Database
from storage.errors import ServiceError

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")


@pytest.mark.asyncio
@pytest.mark.parametrize("statement", [
    "SELECT repeat('x', 1100000000)",  # 54000 program_limit_exceeded: requested length too large
    "SELECT concat(" + ", ".join(["1"] * 101) + ")",  # 54023 too_many_arguments
])
async def test_program_limits_are_a_400_and_the_connection_stays(statement: str) -> None:
    db = Database(DSN, min_size=1, max_size=1)
    await db.pool.open(wait=True, timeout=30)
    try:
        with pytest.raises(ServiceError) as caught:
            async with db.connection() as conn:
                await conn.execute(statement)
        assert caught.value.status == 400 and caught.value.code == "DATABASE_LIMIT_EXCEEDED", caught.value
        assert "connection" not in caught.value.message
        async with db.connection() as conn:
            assert await (await conn.execute("SELECT 1")).fetchone() is not None
    finally:
        await db.pool.close()
