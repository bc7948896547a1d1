"""Local activities that load a batch's records and write its computed values back."""

from __future__ import annotations

import time
from typing import Any

from temporalio import activity

from datetime import datetime

from activities import formula, json_parser
from activities.ledger import Ledger
from activities.metrics import observe_step
from activities.snap import step_value, table_meta
from activities.types import FusedInput, LoadInput, PipelineResult, WriteInput
from storage import records as rec
from storage.db import Database


class RecordIO:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def _load(self, inp: LoadInput) -> dict[str, dict[str, Any]]:
        table = table_meta(inp.table)
        async with self.db.connection() as conn:
            rows = await rec.get_record_rows(conn, table=table, record_ids=inp.record_ids)
        out: dict[str, dict[str, Any]] = {}
        for row in rows:
            fields = {c.name: step_value(c, row.get(c.physical)) for c in table.columns}
            fields["id"] = row["id"]
            out[str(row["id"])] = fields
        return out

    @activity.defn(name="load_records")
    async def load_records(self, inp: LoadInput) -> dict[str, dict[str, Any]]:
        """record id → fields by column name (selects as labels), for the steps to read."""
        return await self._load(inp)

    @activity.defn(name="pure_pipeline")
    async def pure_pipeline(self, inp: FusedInput) -> PipelineResult:
        """Load the records, evaluate every level of formula/parser columns in order, and
        write the results: a whole pipeline of pure steps in one local activity."""
        p = inp.pipeline
        fields = await self._load(LoadInput(table=p.table, record_ids=p.record_ids))
        ledger = Ledger(p, list(fields))
        cols = {c.id: c for c in p.table.columns}
        now = datetime.fromisoformat(inp.now)
        for level in p.levels:
            for cid in level:
                col = cols.get(cid)
                if col is None:
                    continue
                rids = ledger.eligible(cid)
                if not rids:
                    continue
                batch = {r: fields[r] for r in rids}
                started = time.perf_counter()
                if col.type == "formula":
                    values, errors = formula.evaluate_batch(col, batch, now)
                else:
                    values, errors = json_parser.evaluate_batch(col, batch)
                observe_step(col.type, "error" if errors else "ok", time.perf_counter() - started, len(batch))
                ledger.apply(cid, rids, values, errors, fields)
        result, updates = ledger.result(inp.run_id)
        if p.write and updates:
            await self.write_results(WriteInput(table=p.table, updates=updates))
        return result

    @activity.defn(name="write_results")
    async def write_results(self, inp: WriteInput) -> int:
        """Write every record's computed values and outcome in one statement."""
        table = table_meta(inp.table)
        updates = [
            (u["id"], {int(k): v for k, v in u["values"].items()}, u["outcome"]) for u in inp.updates
        ]
        async with self.db.transaction() as conn:
            rows = await rec.write_computed(conn, table=table, updates=updates)
        return len(rows)
