"""Building the input of a bulk run (run-actions, schedules, MCP) from a table and a caller.

One function so that ``POST /run-actions`` and every schedule firing plan the same way:
which columns run (all in create mode, or exactly ``column_ids`` in edit mode), in which
levels, what each failure skips, and the plan's per-row budgets.
"""

from __future__ import annotations

from typing import Any

from activities.snap import table_snap
from activities.types import BulkInput, Caller
from storage.pipelines import graph, plan_steps
from storage.plans import plan as plan_of
from storage.schema import ColumnType, TableMeta

# formula/parser chunks run as one local activity each (workflows/bulk.py): larger chunks
# cost less per row; other kinds keep 200 (a chunk's pipeline shares the per-row budget)
FUSED_KINDS = frozenset({ColumnType.FORMULA, ColumnType.JSON_PARSER})
FUSED_CHUNK = 1000


def dependants_map(table: TableMeta) -> dict[str, list[int]]:
    """Column id → ids of the computed columns that read it, transitively (in column order).

    Memoised per table version (every write of the table puts it in its run's input;
    callers only read it)."""
    found_map = table.memo.get("dependants_map")
    if found_map is not None:
        return found_map  # type: ignore[no-any-return]
    g = graph(table)
    order = [c.id for c in table.columns]
    out: dict[str, list[int]] = {}
    for cid in order:
        found = g.dependants([cid])
        out[str(cid)] = [c for c in order if c in found]
    table.memo["dependants_map"] = out
    return out


def build_bulk_input(
    table: TableMeta, caller: Caller, plan_name: str, *, run_id: str, record_ids: list[int] | None,
    filters: list[dict[str, Any]], column_ids: list[int] | None, chunks_per_run: int,
) -> BulkInput:
    """The BulkRunWorkflow input for ``record_ids`` (or every record matching ``filters``);
    ``chunks_per_run``: ``WDS_BULK_CHUNKS_PER_RUN``, as the caller's settings say."""
    levels = plan_steps(table, mode="edit", only=column_ids) if column_ids else plan_steps(table, mode="create")
    p = plan_of(plan_name)
    fused = bool(levels) and all(c.type in FUSED_KINDS for lvl in levels for c in lvl)
    return BulkInput(
        run_id=run_id, table=table_snap(table), caller=caller,
        levels=[[c.id for c in lvl] for lvl in levels], dependants=dependants_map(table),
        record_ids=record_ids, filters=filters, mode="edit" if column_ids else "create",
        time_budget_s=float(p.pipeline_seconds_per_row), step_budget=p.pipeline_steps_per_row,
        chunk=FUSED_CHUNK if fused else 200, chunks_per_run=chunks_per_run,
    )
