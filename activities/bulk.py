"""Local activities of bulk runs: paging record ids through filters, and progress."""

from __future__ import annotations

from temporalio import activity

from activities.snap import table_meta
from activities.types import PageInput, ProgressInput
from storage import runs
from storage.db import Database
from storage.query import parse_filter_list, plan_filters
from storage.records import page_ids


class BulkSteps:
    def __init__(self, db: Database) -> None:
        self.db = db

    @activity.defn(name="page_ids")
    async def page_ids(self, inp: PageInput) -> list[int]:
        table = table_meta(inp.table)
        filters = plan_filters(parse_filter_list(inp.filters), table) if inp.filters else ()
        async with self.db.connection() as conn:
            return await page_ids(conn, table=table, filters=filters, after_id=inp.after_id, limit=inp.limit)

    @activity.defn(name="run_progress")
    async def run_progress(self, inp: ProgressInput) -> None:
        async with self.db.connection() as conn:
            await runs.set_progress(conn, run_id=inp.run_id, done=inp.done, failed=inp.failed, status=inp.status,
                                    errors=inp.errors or None)
