"""The API's pool hands out the connection returned last (``storage.db.LifoPool``)."""

from __future__ import annotations

import os

import pytest

from storage.db import Database

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")


@pytest.mark.asyncio
async def test_the_pool_hands_out_the_connection_returned_last() -> None:
    db = Database(DSN, min_size=3, max_size=3)
    await db.pool.open(wait=True, timeout=30)
    try:
        pool = db.pool
        taken = [await pool.getconn() for _ in range(3)]
        backends = [c.info.backend_pid for c in taken]
        for conn in taken:  # returned oldest first: the last one back is taken[2]
            await pool.putconn(conn)
        again = await pool.getconn()
        assert again.info.backend_pid == backends[2]
        await pool.putconn(again)
        # sequential use keeps to one warm backend instead of cycling through all three
        seen = set()
        for _ in range(6):
            async with pool.connection() as conn:
                seen.add(conn.info.backend_pid)
        assert seen == {backends[2]}
    finally:
        await db.pool.close()
