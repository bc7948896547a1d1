"""Local activities that load a batch's records and write its computed values back."""

from __future__ import annotations

from typing import Any

from temporalio import activity

from activities.snap import step_value, table_meta
from activities.types import LoadInput, WriteInput
from storage import records as rec
from storage.db import Database


class RecordIO:
    def __init__(self, db: Database) -> None:
        self.db = db

    @activity.defn(name="load_records")
    async def load_records(self, inp: LoadInput) -> dict[str, dict[str, Any]]:
        """record id → fields by column name (selects as labels), for the steps to read."""
        table = table_meta(inp.table)
        async with self.db.connection() as conn:
            rows = await rec.get_record_rows(conn, table=table, record_ids=inp.record_ids)
        out: dict[str, dict[str, Any]] = {}
        for row in rows:
            fields = {c.name: step_value(c, row.get(c.physical)) for c in table.columns}
            fields["id"] = row["id"]
            out[str(row["id"])] = fields
        return out

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
