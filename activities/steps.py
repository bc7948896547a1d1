"""The ``pure_step`` local activity: formula and json_parser over a batch of records."""

from __future__ import annotations

from datetime import datetime

from temporalio import activity

from activities import formula, json_parser
from activities.metrics import timed_step
from activities.results import fit_share
from activities.sandbox import sandbox
from activities.types import ColumnSnap, StepInput, StepResult


def column_for_step(inp: StepInput) -> ColumnSnap:
    col = next(c for c in inp.table.columns if c.id == inp.column_id)
    if inp.override:
        # a loop's sub-step: same column identity, the sub-step's kind and config
        col = ColumnSnap(id=col.id, name=col.name, type=inp.override["type"],
                         config=inp.override.get("config") or {}, formula=(inp.override.get("config") or {}).get("formula"))
    return col


@activity.defn(name="pure_step")
@timed_step  # Prometheus wds_step_duration_seconds{kind, status}
async def pure_step(inp: StepInput) -> StepResult:
    col = column_for_step(inp)
    records = inp.records
    if inp.items is not None:
        records = {rid: {**f, "item": inp.items.get(rid)} for rid, f in records.items()}
    if col.type == "formula":
        # one column of a workflow step: its batch budget starts now (the workflow keeps
        # the plan's time budget per row across steps)
        budget = formula.Budget.for_run(activity.info().start_to_close_timeout.total_seconds()
                                        if activity.info().start_to_close_timeout else 10.0)
        values, errors = await formula.evaluate_column(col, records, datetime.fromisoformat(inp.now), budget,
                                                       sandbox(), workspace=inp.table.workspace_id)
    elif col.type == "json_parser" and formula.sandbox_bound(col):  # a path that can build more than it reads
        budget = formula.Budget.for_run(activity.info().start_to_close_timeout.total_seconds()
                                        if activity.info().start_to_close_timeout else 10.0)
        values, errors = await sandbox().json_parser(col, records, budget, workspace=inp.table.workspace_id)
    elif col.type == "json_parser":
        values, errors = json_parser.evaluate_batch(col, records)
    else:
        return StepResult(errors={rid: f"{col.type} is not a pure step" for rid in records})
    # within what one Temporal payload carries (a REPT over a long text, a concat of long
    # fields over a batch): values in record order while they fit, the rest failing, or
    # within the share of a workflow task the workflow gave this call (the rest to run again)
    return fit_share(StepResult(values=values, errors=errors), inp.max_result_bytes, "value")
