"""Backfills: recomputing a table's existing rows after a schema change (issue #21).

Creating a computed column, or changing its formula or configuration (or the type or
options of a column it reads), leaves every existing row with a stale or empty value
unless the rows are recomputed. :func:`backfill_after_change` is the one entry point (the
REST column routes call it, and the MCP builder's column tools go through those routes):
it picks the columns to recompute and starts a tracked bulk run over every row of the
table (``BulkRunWorkflow``, chunked, progress at ``GET {rest}/runs/{run_id}``).

- Pure kinds (formula, json_parser, fetch_records) are recomputed automatically; kinds
  with side effects (http_request, action, ai_agent, create/update/delete_record, loop,
  delay) only when the request says ``"backfill": true``; ``"backfill": false`` opts out.
- The changed column's dependants (transitively) follow in dependency order.
- One backfill per table at a time: the workflow id is ``backfill-ws<ws>-t<table>``,
  started with ``TERMINATE_EXISTING``. A newer change supersedes the running backfill:
  that run ends ``superseded`` and the new one takes over its columns too (so a column
  the first one had not finished is not left half done).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from temporalio.common import WorkflowIDConflictPolicy

from activities.bulkplan import build_bulk_input
from activities.snap import caller_of
from api.services.limits import charge_automation_runs
from api.state import AppState
from storage import records as rec
from storage import runs
from storage.access import Principal
from storage.errors import ServiceError
from storage.pipelines import dependants
from storage.schema import ColumnMeta, ColumnType, TableMeta
from workflows.bulk import BulkRunWorkflow

# computed kinds without side effects: recomputing them is always safe
PURE_KINDS = frozenset({ColumnType.FORMULA, ColumnType.JSON_PARSER, ColumnType.FETCH_RECORDS})
UNREACHABLE = "the pipeline engine (Temporal) is not reachable; recompute later with run-actions"
_LOCK = 0x42_46_49_4C  # "BFIL": pg_advisory_lock(_LOCK, table id) serialises a table's backfill starts


def backfill_columns(table: TableMeta, changed: ColumnMeta, *, side_effects: bool) -> list[ColumnMeta]:
    """The computed columns to recompute after ``changed`` changed: itself when computed,
    and every computed column reading it (transitively); kinds with side effects only
    when ``side_effects``."""
    names = dependants(table, [changed.name])
    if changed.computed:
        names.add(changed.name)
    return [c for c in table.columns
            if c.computed and c.name in names and (side_effects or c.type in PURE_KINDS)]


def values_change(before: ColumnMeta, after: ColumnMeta) -> bool:
    """Whether an edit can change the column's values or what its readers compute
    (a rename, a move or ``required`` cannot)."""
    return (before.type is not after.type or before.formula != after.formula or before.config != after.config
            or before.options != after.options or before.relation_table_id != after.relation_table_id)


async def backfill_after_change(
    state: AppState, principal: Principal, table_id: int, column_id: int, *,
    before: ColumnMeta | None, requested: bool | None,
) -> dict[str, Any] | None:
    """Recompute existing rows after column ``column_id`` was created (``before`` None) or
    changed (from ``before``); call after the schema change committed.

    Returns ``{run_id, total, status, workflow_id}`` of the backfill started, ``None`` when
    there is nothing to recompute (no rows, no computed column affected, an edit that
    changes no value, or ``requested`` False), or ``{run_id: None, total, status:
    "not_started", error, code}`` when it could not start (the schema change stands).
    """
    if requested is False:
        return None
    # a fresh schema: the schema change dropped the cache
    table = (await state.schema(principal.workspace_id)).tables.get(table_id)
    col = table.column_by_id(column_id) if table is not None else None
    if table is None or col is None:
        return None
    if before is not None and not requested and not values_change(before, col):
        return None
    columns = backfill_columns(table, col, side_effects=bool(requested))
    if not columns:
        return None
    return await start_backfill(state, principal, table, [c.id for c in columns], charge=bool(requested))


async def start_backfill(state: AppState, principal: Principal, table: TableMeta, column_ids: list[int], *,
                         charge: bool = False) -> dict[str, Any] | None:
    """Start (or restart, taking over the running one's columns) the table's backfill of
    ``column_ids`` over every row. ``charge``: count the rows as automation runs."""
    async with state.db.connection() as conn:
        total = await rec.count_matching(conn, table=table, filters=())
    if total == 0:
        return None
    if state.temporal is None:
        return _not_started(total, UNREACHABLE, "UNAVAILABLE")
    if charge:
        try:
            await charge_automation_runs(state, principal, total)
        except ServiceError as exc:
            return _not_started(total, exc.message, exc.code)
    run_id = f"run-{uuid.uuid4().hex[:16]}"
    wid = f"backfill-ws{table.workspace_id}-t{table.id}"
    async with state.db.connection() as conn:
        # a session lock (not a transaction): the run's row must be committed before its
        # workflow can report progress on it
        await conn.execute("SELECT pg_advisory_lock(%s, %s)", (_LOCK, table.id))
        try:
            async with conn.transaction():
                prev = await runs.running_backfill(conn, workspace_id=table.workspace_id, table_id=table.id)
                wanted = set(column_ids)
                if prev is not None:
                    wanted |= {cid for cid in prev["column_ids"] or [] if _computed(table, cid)}
                    await runs.supersede(conn, run_id=prev["id"], by=run_id)
                ids = [c.id for c in table.columns if c.id in wanted]
                await runs.create_run(conn, run_id=run_id, workspace_id=table.workspace_id, table_id=table.id,
                                      total=total, workflow_id=wid, kind="backfill", column_ids=ids)
            inp = build_bulk_input(table, caller_of(principal), principal.plan, run_id=run_id, record_ids=None,
                                   filters=[], column_ids=ids, chunks_per_run=state.settings.bulk_chunks_per_run)
            try:
                await state.temporal.start_workflow(
                    BulkRunWorkflow.run, inp, id=wid, task_queue=state.settings.task_queue,
                    id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING,
                    execution_timeout=timedelta(days=7),
                    # the per-table session lock is held across this call (see above): the
                    # deadline bounds how long one pooled connection can wait on Temporal
                    rpc_timeout=timedelta(seconds=state.settings.temporal_rpc_timeout_s),
                    memo={"workspace": table.workspace_id, "table": table.id, "kind": "backfill", "run_id": run_id,
                          "columns": [table.column_by_id(cid).name for cid in ids]},  # type: ignore[union-attr]
                )
            except Exception as exc:  # Temporal refused or is unreachable: the previous run goes on
                await runs.abandon(conn, run_id=run_id, previous=prev["id"] if prev else None,
                                   error=f"could not start: {type(exc).__name__}")
                return _not_started(total, UNREACHABLE, "UNAVAILABLE")
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s, %s)", (_LOCK, table.id))
    return {"run_id": run_id, "total": total, "status": "running", "workflow_id": wid}


def _computed(table: TableMeta, cid: int) -> bool:
    col = table.column_by_id(cid)
    return col is not None and col.computed


def _not_started(total: int, error: str, code: str) -> dict[str, Any]:
    return {"run_id": None, "total": total, "status": "not_started", "error": error, "code": code}
