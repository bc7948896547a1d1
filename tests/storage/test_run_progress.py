"""A run's progress: ``done`` and ``failed`` only move forward, and ``total`` (counted
when the run started) grows to cover rows the run reached that were created since — a
backfill pages the whole table, so its ``done`` read past its ``total`` (2,931 of 2,326)."""

from __future__ import annotations

import os
import secrets

import psycopg
import pytest
from psycopg.rows import dict_row

from storage import runs

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")


@pytest.mark.asyncio
async def test_total_covers_what_the_run_reached_and_progress_only_moves_forward(ws):
    t = ws.create_table("Progress", [{"name": "A", "type": "number"}])
    run_id = f"run-{secrets.token_hex(8)}"
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True, row_factory=dict_row) as conn:
        await runs.create_run(conn, run_id=run_id, workspace_id=ws.id, table_id=t["id"], total=10,
                              workflow_id=f"bulk/{run_id}", kind="backfill")

        async def state() -> tuple[int, int, int, str]:
            row = await runs.get_run(conn, workspace_id=ws.id, run_id=run_id)
            assert row is not None
            return row["total"], row["done"], row["failed"], row["status"]

        await runs.set_progress(conn, run_id=run_id, done=6, failed=1, status=None)
        assert await state() == (10, 6, 1, "running")
        await runs.set_progress(conn, run_id=run_id, done=12, failed=1, status=None)  # 3 rows created meanwhile
        assert await state() == (13, 12, 1, "running")
        await runs.set_progress(conn, run_id=run_id, done=5, failed=0, status=None)  # an older report
        assert await state() == (13, 12, 1, "running")
        await runs.set_progress(conn, run_id=run_id, done=12, failed=1, status="completed_with_errors")
        assert await state() == (13, 12, 1, "completed_with_errors")

