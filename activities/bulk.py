"""Local activities of bulk runs: paging record ids through filters, what each record
would carry through a run's history, and progress."""

from __future__ import annotations

import psycopg
from temporalio import activity

from activities.ledger import row_cost, run_columns, run_reads
from activities.snap import table_meta
from activities.types import CostInput, PageInput, ProgressInput
from storage import runs
from storage.db import Database
from storage.query import parse_filter_list, plan_filters
from storage.records import json_sizes, page_ids


class BulkSteps:
    def __init__(self, db: Database) -> None:
        self.db = db

    @activity.defn(name="page_ids")
    async def page_ids(self, inp: PageInput) -> list[int]:
        table = table_meta(inp.table)
        filters = plan_filters(parse_filter_list(inp.filters), table) if inp.filters else ()
        async with self.db.connection() as conn:
            return await page_ids(conn, table=table, filters=filters, after_id=inp.after_id, limit=inp.limit)

    @activity.defn(name="record_costs")
    async def record_costs(self, inp: CostInput) -> list[list[int]]:
        """``[[record id, bytes], ...]`` in the order of ``inp.record_ids``: what a run of
        ``inp.levels`` would carry through its history for each record before any step
        returns (activities.ledger.row_cost), estimated from the stored values; 0 for a
        record gone, or when a column was deleted meanwhile (the run itself is bounded)."""
        reads = run_reads(run_columns(inp.table.columns, inp.levels))
        names = None if reads is None else sorted(reads)
        try:
            async with self.db.connection() as conn:
                sizes = await json_sizes(conn, table=table_meta(inp.table), record_ids=inp.record_ids, names=names)
        except psycopg.errors.UndefinedColumn:
            sizes = {}
        return [[rid, row_cost(sizes[rid], inp.table.columns, inp.levels) if rid in sizes else 0]
                for rid in inp.record_ids]

    @activity.defn(name="run_progress")
    async def run_progress(self, inp: ProgressInput) -> None:
        async with self.db.connection() as conn:
            await runs.set_progress(conn, run_id=inp.run_id, done=inp.done, failed=inp.failed, status=inp.status,
                                    errors=inp.errors or None)
