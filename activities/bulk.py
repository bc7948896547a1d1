"""Local activities of bulk runs: paging record ids through filters, what each record
would carry through a run's history, and progress."""

from __future__ import annotations

import psycopg
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.ledger import row_cost, run_columns, run_reads
from activities.records_io import table_now
from activities.snap import table_meta
from activities.types import CostInput, PageInput, ProgressInput
from storage import meta, runs
from storage.db import Database
from storage.errors import ServiceError, is_schema_race
from storage.query import parse_filter_list, plan_filters
from storage.query.parse import Filter, Group
from storage.records import json_sizes, page_ids
from storage.schema import TableMeta


def _columns_named(filters: tuple[Filter | Group, ...]) -> set[str]:
    """The column names the parsed ``filters`` name, in groups too."""
    out: set[str] = set()
    for f in filters:
        out |= _columns_named(f.items) if isinstance(f, Group) else {f.column}
    return out


class BulkSteps:
    def __init__(self, db: Database) -> None:
        self.db = db

    @activity.defn(name="page_ids")
    async def page_ids(self, inp: PageInput) -> list[int]:
        """The next page of the run's record ids. Its filters are planned against the run's
        table snapshot while the columns they name are stored as it says; when one was
        converted or deleted since (seen by its type, or by the statement failing as
        stale), against the table as it is now: a text converted to a select holds option
        ids, and the snapshot's plan compared them with the label, finding nothing. When
        the filters no longer apply to the table as it is, the run ends with that reason
        (non-retryable: every attempt would fail alike)."""
        stale = False
        if inp.filters:
            named = _columns_named(parse_filter_list(inp.filters))
            async with self.db.connection() as conn:
                stale = bool(await meta.changed_columns(conn, table_id=inp.table.id, types={
                    c.id: c.type for c in inp.table.columns if c.name in named}))
        if not stale:
            try:
                return await self._page(inp, table_meta(inp.table))
            except psycopg.Error as exc:
                if not (inp.filters and is_schema_race(exc)):
                    raise
        now = await table_now(self.db, inp.table)
        try:
            return await self._page(inp, now)
        except ServiceError as exc:
            raise ApplicationError(f"the run's filter no longer applies to the table as changed while it ran:"
                                   f" {exc.message}", type="FILTER_STALE", non_retryable=True) from None

    async def _page(self, inp: PageInput, table: TableMeta) -> list[int]:
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
