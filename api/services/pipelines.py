"""Running a table's computed columns after a write (DESIGN §5).

A write that will run computed columns queues its pipeline in the outbox inside the
write's own transaction (:func:`queue_pipeline`); after the commit the API starts the
workflow (eager start on the in-process worker when there is one) and waits for its
result (:func:`await_pipeline`), so the write response carries the computed values and
``pipeline: {status, run_id, errors}``. If Temporal cannot be reached the response says
``status: "queued"`` and the outbox relay (``service/relay.py``) starts the run later,
exactly once. Tables without computed columns to run (and ``run_pipeline=false``) skip
all of it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Coroutine
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client import Counter, Histogram
from psycopg import AsyncConnection

from activities import sandbox, written
from activities.bulkplan import dependants_map
from activities.ledger import outcome as record_outcome
from activities.ledger import remote_step, row_cost, run_columns, run_reads, runs_by_bytes
from activities.metrics import observe_step
from activities.records_io import decode_rows, evaluate_pure
from activities.results import json_size
from activities.snap import caller_of, table_snap
from activities.types import FusedInput, PipelineInput, PipelineResult, RecordOutcome
from api.services.embeddings import refresh_after_write
from api.services.limits import charge_automation_runs, runtime
from api.state import AppState
from service.relay import GRACE_S, encode_input, start_pipeline
from storage import outbox
from storage import records as rec
from storage.access import Principal
from storage.errors import NotFound, PlanLimit, ServiceError
from storage.formula.insql import MAX_BOUND, OutOfRange, SqlArithmetic, plan_sql_arithmetic
from storage.pipelines import plan_steps
from storage.plans import plan as plan_of
from storage.refs import names_read
from storage.schema import ColumnMeta, ColumnType, TableMeta, value_fits

log = logging.getLogger("wds.pipelines")
CHUNK = 500  # records per workflow for batches (fewer when they carry many bytes: run_chunks)


PIPELINE_SECONDS = Histogram(
    "wds_pipeline_duration_seconds",
    "Time a write waited for its pipeline workflows, by mode (create/edit) and outcome",
    ("mode", "status"),
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0),
)
PIPELINE_RECORDS = Histogram(
    "wds_pipeline_records",
    "Records per write whose pipeline ran",
    ("mode",),
    buckets=(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000),
)


FORMULAS_IN_SQL = Counter(
    "wds_formula_values_in_sql",
    "Formula values PostgreSQL computed in a create's INSERT (plain arithmetic, storage/formula/insql.py)",
)


def observe_pipeline(mode: str, status: str, seconds: float, records: int) -> None:
    """Record one write's pipeline wait (``status``: ok, error, timeout, failed)."""
    PIPELINE_SECONDS.labels(mode, status).observe(seconds)
    PIPELINE_RECORDS.labels(mode).observe(records)



def workflow_id(table: TableMeta, mode: str, record_ids: list[int]) -> str:
    first = record_ids[0] if record_ids else 0
    more = f"+{len(record_ids) - 1}" if len(record_ids) > 1 else ""
    return f"pipeline/ws{table.workspace_id}/t{table.id}/{mode}/r{first}{more}/{uuid.uuid4().hex[:10]}"


def pipeline_input(
    principal: Principal, table: TableMeta, record_ids: list[int], mode: str, levels: list[list[ColumnMeta]]
) -> PipelineInput:
    p = plan_of(principal.plan)
    return PipelineInput(
        table=table_snap(table),
        record_ids=record_ids,
        mode=mode,
        levels=[[c.id for c in level] for level in levels],
        caller=caller_of(principal),
        time_budget_s=float(p.pipeline_seconds_per_row),
        step_budget=p.pipeline_steps_per_row,
        dependants=dependants_map(table),
    )


def vanished(run_id: str | None) -> dict[str, Any]:
    """The outcome of a record deleted while its run ran (nothing of the run was stored)."""
    return {"status": "error", "run_id": run_id, "errors": {"_record": "record vanished during the run"}}


def outcome_of(result: PipelineResult, record_id: int) -> dict[str, Any]:
    o = result.records.get(str(record_id))
    if o is not None:
        return {"status": o.status, "run_id": result.run_id, "errors": o.errors}
    if str(record_id) in result.ok:
        return {"status": "ok", "run_id": result.run_id, "errors": {}}
    return vanished(result.run_id)


def outcomes_of(results: list[PipelineResult]) -> dict[str, dict[str, Any]]:
    """Record id → outcome over every result, in one pass (``outcome_of`` per record
    scans the ``ok`` list: quadratic for a batch)."""
    out: dict[str, dict[str, Any]] = {}
    for res in results:
        for rid in res.ok:
            out[rid] = {"status": "ok", "run_id": res.run_id, "errors": {}}
        for rid, o in res.records.items():
            out[rid] = {"status": o.status, "run_id": res.run_id, "errors": o.errors}
    return out


@dataclass
class Pending:
    """A pipeline queued in the outbox with its write, waiting to be started."""

    runs: list[tuple[str, PipelineInput, dict[str, Any]]]  # (workflow id, input, input encoded) per chunk
    outcome: dict[str, Any] | None = None  # set when the run cannot happen (quota)


def will_run(table: TableMeta, *, mode: str, changed: list[str] | None, enabled: bool,
             only: list[int] | None = None) -> list[list[ColumnMeta]]:
    """The levels a write would run (empty: no pipeline, no transaction needed)."""
    if not enabled:
        return []
    return plan_steps(table, mode=mode, changed=changed or (), only=only)


async def queue_pipeline(
    state: AppState, principal: Principal, table: TableMeta, conn: AsyncConnection[Any],
    rows: list[dict[str, Any]], *, mode: str, levels: list[list[ColumnMeta]], charged: bool = False,
) -> Pending | None:
    """Inside the write's transaction: charge the automation runs (unless ``charged``
    already) and add outbox rows."""
    if not rows or not levels:
        return None
    ids = [r["id"] for r in rows]
    try:  # one automation run per record (monthly quota); the write itself still happens
        if not charged:
            await charge_automation_runs(state, principal, len(ids))
    except PlanLimit as exc:
        outcome = {"status": "error", "run_id": None, "errors": {"_pipeline": exc.message},
                   "code": exc.code, "upgrade": True}
        return Pending([], outcome)
    runs = []
    for chunk in run_chunks(table, rows, levels):
        inp = pipeline_input(principal, table, chunk, mode, levels)
        wid = workflow_id(table, mode, chunk)  # unique (random suffix); kept in the outbox row
        encoded = encode_input(inp)
        inp.outbox_id = await outbox.add(conn, workspace_id=table.workspace_id, table_id=table.id,
                                         payload={"workflow_id": wid, "input": encoded})
        runs.append((wid, inp, {**encoded, "outbox_id": inp.outbox_id}))
    return Pending(runs)


def run_chunks(table: TableMeta, rows: list[dict[str, Any]], levels: list[list[ColumnMeta]]) -> list[list[int]]:
    """The ids of ``rows`` in runs of at most :data:`CHUNK` records; with a step whose
    input its history records (an HTTP, action or AI step, or a loop of one), also of at
    most ``RUN_PLAN_BYTES`` of what the run would carry for them (activities.ledger
    row_cost: a run's workflow history is bounded, docs/decisions.md)."""
    ids = [r["id"] for r in rows]
    remote = any(remote_step(c.type.value, c.config) for level in levels for c in level)
    if not remote:
        return [ids[i:i + CHUNK] for i in range(0, len(ids), CHUNK)]
    snap = table_snap(table)
    plan = [[c.id for c in level] for level in levels]
    names = run_reads(run_columns(snap.columns, plan))
    fields = decode_rows(table, rows)  # measured as the run's loads and steps will hand them over
    costs = [(r["id"], row_cost({k: json_size(v) for k, v in fields[str(r["id"])].items() if names is None or k in names},
                                snap.columns, plan)) for r in rows]
    return runs_by_bytes(costs, max_rows=CHUNK)


async def fair_turn(state: AppState, workspace_id: int) -> None:
    """Before a write that starts a pipeline run: wait for the workspace's share of runs
    while this process is short of CPU and another workspace is active
    (:mod:`api.services.fairness`; no wait otherwise). A workspace whose last sandbox
    batch in this process burned past its demotion threshold gets the heavy share."""
    await runtime(state).fairness.admit(workspace_id, heavy=sandbox.heavy(workspace_id))


def _single_or_batch(outcome: dict[str, Any], n: int) -> dict[str, Any]:
    return outcome if n == 1 else {**outcome, "per_record": {}}


def _in_background(state: AppState, key: str, work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` after the answer, held in ``state.extras[key]`` until it ends (the loop
    keeps only weak references to tasks)."""
    tasks: set[asyncio.Task[None]] = state.extras.setdefault(key, set())
    task = asyncio.create_task(work)
    tasks.add(task)
    task.add_done_callback(tasks.discard)


async def _forget(state: AppState, outbox_ids: list[int]) -> None:
    with suppress(ServiceError):
        async with state.db.connection() as conn:
            await outbox.remove(conn, outbox_ids=outbox_ids)


def _forget_soon(state: AppState, outbox_id: int) -> None:
    """Delete a recorded run's outbox row with the others recorded within
    :data:`FORGET_EVERY_S`: one statement for them all instead of one each. A row not yet
    deleted when the process stops is started again by the relay, which finds the run
    recorded (``REJECT_DUPLICATE``) and deletes it."""
    pending: list[int] = state.extras.setdefault("forget", [])
    pending.append(outbox_id)
    if len(pending) == 1:
        _in_background(state, "background", _forget_pending(state))


async def _forget_pending(state: AppState) -> None:
    await asyncio.sleep(FORGET_EVERY_S)
    await _forget(state, state.extras.pop("forget", []))


@dataclass
class _Committed:
    """A run whose write committed in this process (:mod:`activities.written`) while its
    workflow result is still on its way through Temporal."""

    workflow_id: str
    record_ids: list[int]
    result: asyncio.Future[PipelineResult]
    deadline: float  # event-loop time at which the wait gives up (budget + grace)
    rows: list[dict[str, Any]]  # the rows the run's write returned


def _result_from_rows(run: _Committed, by_id: dict[int, dict[str, Any]]) -> PipelineResult | None:
    """The run's result as its write stored it: every record's ``_pipeline`` is the
    ``{status, run_id, errors}`` the workflow returns. ``None`` when a record is gone or
    carries another run's outcome (a concurrent run wrote after it): then only the
    workflow result is exact."""
    result = PipelineResult(run_id=run.workflow_id, status="ok")
    for rid in run.record_ids:
        row = by_id.get(rid)
        stored = row.get("_pipeline") if row is not None else None
        if not isinstance(stored, dict) or stored.get("run_id") != run.workflow_id:
            return None
        if stored.get("status") == "ok" and not stored.get("errors"):
            result.ok.append(str(rid))
        else:
            result.records[str(rid)] = RecordOutcome(status=str(stored.get("status")), errors=dict(stored.get("errors") or {}))
            result.status = "error"
    return result


async def await_pipeline(
    state: AppState, table: TableMeta, rows: list[dict[str, Any]], pending: Pending | None,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """After the commit: start the queued runs and wait for them.

    For one row the outcome is ``{status, run_id, errors}``; for several it adds
    ``per_record`` (record id → outcome) and ``status`` is ``error`` if any row failed.

    A run executed by this process's worker hands over the rows its write returned as
    soon as it has committed (:mod:`activities.written`): the answer is built from them
    (their ``_pipeline`` is the run's outcome per record) without reading the rows again
    and without waiting for Temporal to record the workflow's completion. Otherwise (a run
    on another worker, a record gone or rewritten by a concurrent run) the workflow result
    and a fresh read answer, as before.
    """
    if pending is None:
        return rows, None
    if pending.outcome is not None:
        return rows, _single_or_batch(pending.outcome, len(rows))
    run_ids = [wid for wid, _, _ in pending.runs]
    if state.temporal is None:  # the outbox relay starts them
        queued = {"status": "queued", "run_id": run_ids[0], "errors": {}}
        return rows, _single_or_batch({**queued, "run_ids": run_ids} if len(rows) > 1 else queued, len(rows))
    started: list[int] = []
    loop = asyncio.get_running_loop()
    by_written = {r["id"]: r for r in rows}  # the rows as this write committed them

    async def one(wid: str, inp: PipelineInput, encoded: dict[str, Any]) -> PipelineResult | _Committed | None:
        committed = (written.expect(wid, [by_written[i] for i in inp.record_ids if i in by_written])
                     if state.worker is not None else None)
        try:
            try:
                handle = await start_pipeline(
                    state.temporal, workflow_id=wid, inp=inp, task_queue=state.settings.task_queue,
                    eager=state.worker is not None, search_attributes=state.settings.temporal_search_attributes,
                    encoded=encoded,
                )
            except Exception as exc:  # Temporal unreachable: the relay starts it from the outbox
                log.warning("pipeline %s queued: %s", wid, type(exc).__name__)
                return None
            started.append(inp.outbox_id or 0)
            deadline = loop.time() + inp.time_budget_s + GRACE_S
            result: asyncio.Future[PipelineResult] = asyncio.ensure_future(handle.result())
            handed = False  # the result future goes on with a _Committed (the caller settles it)
            try:
                if committed is not None:
                    await asyncio.wait({result, committed}, timeout=deadline - loop.time(),
                                       return_when=asyncio.FIRST_COMPLETED)
                    if committed.done() and not result.done():
                        handed = True
                        return _Committed(wid, inp.record_ids, result, deadline, committed.result())
                return await asyncio.wait_for(result, timeout=max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                raise
            except Exception as exc:  # lost Temporal while waiting: the run goes on without us
                log.warning("pipeline %s still running: %s", wid, type(exc).__name__)
                return None
            finally:
                if not handed and not result.done():
                    result.cancel()  # e.g. the request was cancelled
        finally:
            if committed is not None:
                written.forget(wid)

    ids = [r["id"] for r in rows]
    gone: set[int] = set()
    clock, measured = time.perf_counter(), "failed"  # Prometheus: the wait, by mode and outcome
    waits: list[PipelineResult | _Committed | None] = []
    try:
        waits = list(await asyncio.gather(*(one(wid, inp, encoded) for wid, inp, encoded in pending.runs)))
        final: list[dict[str, Any]] = rows
        by_id = {r["id"]: r for w in waits if isinstance(w, _Committed) for r in w.rows}
        if all(isinstance(w, _Committed) for w in waits) and all(i in by_id for i in ids):
            final = [by_id[i] for i in ids]  # every row as its run's write returned it
        elif any(w is not None for w in waits):
            async with state.db.connection() as conn:
                fresh = await rec.get_record_rows(conn, table=table, record_ids=ids)
            by_id = {r["id"]: r for r in fresh}
            # a record deleted while its run ran keeps its place in the answer, as its write
            # committed it, with an error outcome (the answer is by position: a batch's
            # results would otherwise shift onto the wrong inputs)
            gone = {i for i in ids if i not in by_id}
            final = [by_id.get(r["id"], r) for r in rows]
        results: list[PipelineResult | None] = []
        for w in waits:
            if isinstance(w, _Committed):
                res = _result_from_rows(w, by_id)
                if res is None:  # not exact from the rows: wait for the workflow's own result
                    try:
                        res = await asyncio.wait_for(w.result, timeout=max(0.0, w.deadline - loop.time()))
                    except asyncio.TimeoutError:
                        raise
                    except Exception as exc:
                        log.warning("pipeline %s still running: %s", w.workflow_id, type(exc).__name__)
                results.append(res)
            else:
                results.append(w)
        measured = ("queued" if any(r is None for r in results)
                    else "error" if any(r.status == "error" for r in results if r is not None) else "ok")
    except asyncio.TimeoutError:
        measured = "timeout"
        outcome = {"status": "error", "run_id": run_ids[0], "errors": {"_pipeline": "budget_exceeded"}}
        return rows, _single_or_batch(outcome, len(rows))
    finally:
        for w in waits:  # results no longer waited for (the workflows complete on their own)
            if isinstance(w, _Committed):
                if not w.result.done():
                    w.result.cancel()
                elif not w.result.cancelled():
                    w.result.exception()  # retrieved: no "exception never retrieved" noise
        observe_pipeline(pending.runs[0][1].mode, measured, time.perf_counter() - clock, len(rows))
        # started runs no longer need their outbox rows (in the background: not on the answer's path)
        if started:
            _in_background(state, "background", _forget(state, started))
    done = [r for r in results if r is not None]
    if len(done) < len(results):
        status = "queued" if len(started) < len(results) else "running"
        outcome = {"status": status, "run_id": run_ids[0], "errors": {}}
        if not done:
            return rows, _single_or_batch({**outcome, "run_ids": run_ids} if len(rows) > 1 else outcome, len(rows))
    if len(rows) == 1:
        return final, vanished(done[0].run_id) if ids[0] in gone else outcome_of(done[0], ids[0])
    by_record = outcomes_of(done)
    for i in gone:
        by_record[str(i)] = vanished(by_record.get(str(i), {}).get("run_id", run_ids[0]))
    per = {str(i): by_record[str(i)] for i in ids if str(i) in by_record}
    status = "error" if any(o["status"] == "error" for o in per.values()) else "ok"
    if len(done) < len(results):
        status = "queued"
    return final, {"status": status, "run_id": run_ids[0] if len(run_ids) == 1 else None,
                   "run_ids": run_ids, "errors": {}, "per_record": per}


async def run_after_write(
    state: AppState,
    principal: Principal,
    table: TableMeta,
    rows: list[dict[str, Any]],
    *,
    mode: str,
    changed: list[str] | None,
    enabled: bool = True,
    only: list[int] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Queue and run the pipeline for rows already written (re-runs: ``run``, ``compute``).

    Writes use :func:`queue_pipeline` inside their own transaction instead.
    """
    levels = will_run(table, mode=mode, changed=changed, enabled=enabled, only=only)
    if not levels or not rows:
        return rows, None
    await fair_turn(state, table.workspace_id)
    async with state.db.transaction() as conn:
        pending = await queue_pipeline(state, principal, table, conn, rows, mode=mode, levels=levels)
    final, outcome = await await_pipeline(state, table, rows, pending)
    if only is None:
        return await refresh_embeddings(state, table, final, outcome, mode=mode, changed=changed)
    return final, outcome


async def refresh_embeddings(
    state: AppState, table: TableMeta, rows: list[dict[str, Any]], outcome: dict[str, Any] | None,
    *, mode: str, changed: list[str] | None,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """After a write (and its pipeline): re-embed the written records of a table with
    semantic search, from the final rows (so embedded computed columns count). A
    provider failure never fails the write; it shows as ``errors._embedding`` when the
    write reports a pipeline outcome. Tables without semantic search return at once.
    """
    if table.semantic and rows:
        problem = await refresh_after_write(state, table, rows, mode=mode, changed=changed)
        if problem is not None and outcome is not None:
            outcome.setdefault("errors", {})["_embedding"] = problem
    return rows, outcome


# --------------------------------------------------------------------------- staged creates

PRECOMPUTE_KINDS = frozenset({ColumnType.FORMULA, ColumnType.JSON_PARSER})


def _can_precompute(state: AppState, table: TableMeta, levels: list[list[ColumnMeta]], n: int) -> bool:
    """Whether a create of ``n`` records may have its columns computed before its INSERT
    (:func:`create_computed`): formulas and parsers only (one fused local activity, no
    outside call, nothing written by the run), an in-process worker to compute them, a
    table whose records PostgreSQL renders and without semantic search, one chunk."""
    return (state.settings.pipeline_precompute and state.worker is not None and state.temporal is not None
            and 0 < n <= CHUNK and not table.semantic and rec.insert_renderable(table)
            and bool(levels) and all(c.type in PRECOMPUTE_KINDS for level in levels for c in level))


def _reads_record_id(levels: list[list[ColumnMeta]]) -> bool:
    """Whether a column computed here may read the record's id (``fields["id"]``): a
    JavaScript formula (what it reads is not all known before it runs), or a formula or
    parser naming ``id``. Only then must a create's ids exist before its evaluation."""
    for level in levels:
        for c in level:
            if c.type == ColumnType.FORMULA and (c.config or {}).get("language", "excel") != "excel":
                return True
            if "id" in names_read(c.type.value, c.formula, c.config or {}):
                return True
    return False


@dataclass(frozen=True)
class InsertFirst:
    """:func:`create_computed`'s answer when the write must insert first and run after."""

    charged: bool  # the automation runs are paid already


@dataclass
class Computed:
    """What :func:`create_computed` stored: per input row its record's JSON (with its
    ``pipeline``) or the error that kept it out; and the batch's pipeline outcome."""

    records: list[str | ServiceError]
    outcome: dict[str, Any] | None  # None when no record was stored (as on the usual path)
    spaced: list[bool]  # per record: its text is spaced (to be compacted), else compact as orjson writes it


NOT_STORED = "the write did not store this record"
RECORDING_IN_FLIGHT = 64  # runs being recorded in Temporal after their answers, per process
FORGET_EVERY_S = 0.2  # recorded runs' outbox rows are deleted together, at most this late


async def create_computed(
    state: AppState, principal: Principal, table: TableMeta, rows: list[rec.PreparedRow], *, enabled: bool,
) -> Computed | InsertFirst:
    """Create ``rows`` with their computed columns in ONE statement, computed first, when
    the columns a create runs (none unless ``enabled``) allow it (:func:`_can_precompute`).

    The rows are staged (new ids, values typed as stored: typed here when that is certain,
    :func:`storage.records.stage_locally`, else by one SELECT), every level of
    formula/parser columns is evaluated from them here — by the same code and under the
    same budgets as the fused local activity (``activities.records_io.evaluate_pure``;
    formulas off the event loop unless cheap) — and the records go in with their values
    and outcomes and the outbox row of their run in one autocommit statement (a refused
    row: row by row in one transaction). The
    run is then recorded in Temporal after the answer (:func:`_record_run`): a
    ``PipelineWorkflow`` given the stored result, which it returns at once, so an operator
    finds every run in the Temporal UI as before; if this process dies first, the outbox
    relay starts it. Against insert-then-run this saves the second write of every row,
    and against running the workflow first the Temporal round trips on the answer's path
    (decisions.md, "Computed creates: compute, store, then record").

    Returns :class:`InsertFirst` when the caller must insert and run as usual instead:
    nothing to compute this way, quota refused, or the evaluation itself failed (not a
    formula's error: those are the row's outcome).
    """
    levels = will_run(table, mode="create", changed=None, enabled=enabled)
    if not _can_precompute(state, table, levels, len(rows)):
        return InsertFirst(charged=False)
    await fair_turn(state, table.workspace_id)
    try:
        await charge_automation_runs(state, principal, len(rows))
    except PlanLimit:
        return InsertFirst(charged=False)  # the usual path answers it (the write happens, the runs do not)
    clock = time.perf_counter()

    async def allocate() -> list[int]:
        async with state.db.connection() as conn:
            return await rec.allocate_ids(conn, table=table, n=len(rows))

    async def stage() -> list[dict[str, Any]]:
        async with state.db.connection() as conn:
            return await rec.stage_records(conn, table=table, rows=rows)

    local = rec.stage_locally(table, rows)  # plain numbers, text, booleans: typed here, no round trip
    if local is not None and state.settings.pipeline_sql_arithmetic:
        in_sql = await _create_in_sql(state, principal, table, rows, levels, local, clock)
        if in_sql is not None:
            return in_sql
    allocating: asyncio.Task[list[int]] | None = None
    if local is None:
        ids, staged = await asyncio.gather(allocate(), stage())  # two pooled connections, one round trip
    elif _reads_record_id(levels):
        ids, staged = await allocate(), local
    else:
        # nothing computed reads the record id: the ids' round trip overlaps the evaluation,
        # which runs under provisional keys (-1, -2, ...) re-keyed when the ids arrive
        allocating = asyncio.ensure_future(allocate())
        ids, staged = [-(i + 1) for i in range(len(rows))], local
    for row, rid in zip(staged, ids):
        row["id"] = rid
    inp = pipeline_input(principal, table, [] if allocating else ids, "create", levels)
    # evaluate_pure reads neither the record ids nor the run id
    fused = FusedInput(pipeline=inp, run_id="", now=datetime.now(UTC).isoformat())
    try:
        ledger = await asyncio.wait_for(evaluate_pure(fused, decode_rows(table, staged)),
                                        timeout=inp.time_budget_s + GRACE_S)
    except BaseException as exc:  # a timeout, a lost sandbox (a formula's error is an outcome): run as usual
        if allocating is not None:
            allocating.cancel()  # ids taken or not, a sequence's gap is harmless
            with suppress(BaseException):
                await allocating
        if not isinstance(exc, Exception):
            raise  # cancelled: the request is gone
        log.warning("pipeline for %d row(s) of table %s not computed before its insert (%s); inserting first",
                    len(rows), table.id, type(exc).__name__)
        return InsertFirst(charged=True)
    if allocating is not None:
        provisional, ids = ids, await allocating
        ledger.rekey({str(p): str(r) for p, r in zip(provisional, ids, strict=True)})
        inp.record_ids = ids
    wid = workflow_id(table, "create", ids)
    result, updates = ledger.result(wid, json_keys=False)
    by_id = {u["id"]: u for u in updates}  # one per staged row
    computed = [by_id[rid]["values"] for rid in ids]
    outcomes = [by_id[rid]["outcome"] for rid in ids]
    records: list[str | ServiceError]
    spaced: list[bool]
    # the common case in ONE autocommit statement: every record with its values, and the
    # outbox row of its run (atomic by itself; no BEGIN, savepoint or COMMIT round trips)
    ok = record_outcome(wid, {})
    inp.recorded = result
    encoded = encode_input(inp)
    try:
        async with state.db.connection() as conn:
            texts, spaced, outbox_id = await rec.insert_computed_json(
                conn, table=table, rows=rows, ids=ids, computed=computed,
                outcomes=[None if o == ok else o for o in outcomes], ok_outcome=ok,
                outbox_payload={"workflow_id": wid, "input": encoded})
    except NotFound:
        raise  # the table was deleted meanwhile: nothing to store row by row
    except ServiceError:
        # a row the database refuses (a relation to a missing record): row by row, in a
        # transaction with the outbox row of what was stored
        records, stored, encoded = await _insert_computed_rows(state, table, wid, rows, ids, computed, outcomes,
                                                               inp, result)
        spaced = [True] * len(records)
    else:
        records = list(texts)
        stored = set(ids)
        inp.outbox_id = outbox_id
        encoded["outbox_id"] = outbox_id
    if not stored:
        return Computed(records, None, spaced)
    failed = any(o["status"] != "ok" for rid, o in zip(ids, outcomes) if rid in stored)
    status = "error" if failed else "ok"
    observe_pipeline("create", status, time.perf_counter() - clock, len(rows))
    await _record_run(state, wid, inp, encoded)
    return Computed(records, {"status": status, "run_id": wid, "run_ids": [wid], "errors": {}}, spaced)


def _arithmetic(table: TableMeta, levels: list[list[ColumnMeta]],
                local: list[dict[str, Any]], step_budget: int) -> SqlArithmetic | None:
    """The create's columns as PostgreSQL arithmetic (:mod:`storage.formula.insql`) when
    every one qualifies and no step of this batch can leave ±2^53; else ``None``."""
    cols = [c for level in levels for c in level]
    if len(cols) > step_budget:  # the ledger answers the steps over the budget
        return None
    for c in cols:
        if (c.type != ColumnType.FORMULA or c.broken or (c.config or {}).get("language", "excel") != "excel"
                or not (value_fits(c.value_type, 1) and value_fits(c.value_type, 0.5))):
            return None
    plan = plan_sql_arithmetic(
        tuple((c.id, c.name, c.formula or (c.config or {}).get("formula") or "") for c in cols),
        tuple((c.name, c.id) for c in table.columns if c.type == ColumnType.NUMBER))
    if plan is None:
        return None
    largest = {cid: max((abs(v) for row in local if (v := row.get(f"c_{cid}")) is not None), default=0.0)
               for cid in plan.reads}
    return plan if plan.bound(largest) <= MAX_BOUND else None


async def _create_in_sql(
    state: AppState, principal: Principal, table: TableMeta, rows: list[rec.PreparedRow],
    levels: list[list[ColumnMeta]], local: list[dict[str, Any]], clock: float,
) -> Computed | None:
    """:func:`create_computed` when its formulas are plain arithmetic: PostgreSQL computes
    them in the INSERT from the typed input values (:mod:`storage.formula.insql`: the same
    values as the Python evaluator), so nothing is evaluated or encoded here, and every
    record's outcome is the run's ``ok``. ``None`` when the create does not qualify, or
    when the statement was refused (a step out of range, a row the database refuses):
    nothing was stored, and the caller evaluates in Python as usual (taking new ids)."""
    inp = pipeline_input(principal, table, [], "create", levels)
    plan = _arithmetic(table, levels, local, inp.step_budget)
    if plan is None:
        return None
    async with state.db.connection() as conn:
        ids = await rec.allocate_ids(conn, table=table, n=len(rows))
    inp.record_ids = ids
    wid = workflow_id(table, "create", ids)
    ok = record_outcome(wid, {})
    inp.recorded = PipelineResult(run_id=wid, status="ok", ok=[str(i) for i in ids])
    encoded = encode_input(inp)
    try:
        async with state.db.connection() as conn:
            texts, spaced, outbox_id = await rec.insert_computed_json(
                conn, table=table, rows=rows, ids=ids, computed=[{}] * len(rows), outcomes=[None] * len(rows),
                ok_outcome=ok, outbox_payload={"workflow_id": wid, "input": encoded}, arithmetic=plan)
    except NotFound:
        raise
    except (ServiceError, OutOfRange):
        return None
    inp.outbox_id = outbox_id
    encoded["outbox_id"] = outbox_id
    elapsed = time.perf_counter() - clock
    observe_step("formula", "ok", elapsed, len(rows) * len(plan.columns))
    FORMULAS_IN_SQL.inc(len(rows) * len(plan.columns))
    observe_pipeline("create", "ok", elapsed, len(rows))
    await _record_run(state, wid, inp, encoded)
    return Computed(list(texts), {"status": "ok", "run_id": wid, "run_ids": [wid], "errors": {}}, spaced)


async def _insert_computed_rows(
    state: AppState, table: TableMeta, wid: str, rows: list[rec.PreparedRow], ids: list[int],
    computed: list[Any], outcomes: list[dict[str, Any]], inp: PipelineInput, result: Any,
) -> tuple[list[str | ServiceError], set[int], dict[str, Any]]:
    """:func:`create_computed`'s insert when the one statement was refused: each row under
    its own savepoint, and the run's outbox row in the same transaction with the result
    saying which records were not stored. Returns each row's record JSON or error, the
    stored ids and the run's encoded input (with ``outbox_id``; sets ``inp.outbox_id``)."""
    records: list[str | ServiceError] = []
    encoded: dict[str, Any] = {}
    async with state.db.transaction() as conn:
        for i, row in enumerate(rows):
            try:
                async with conn.transaction():
                    texts, _, _ = await rec.insert_computed_json(conn, table=table, rows=[row], ids=[ids[i]],
                                                              computed=[computed[i]], outcomes=[outcomes[i]])
                    records.extend(texts)
            except ServiceError as exc:
                records.append(exc)
        stored = {rid for rid, r in zip(ids, records) if not isinstance(r, ServiceError)}
        for rid in ids:
            if rid not in stored:  # the run's result says so, as Temporal records it
                key = str(rid)
                result.records[key] = RecordOutcome(status="error", errors={"_record": NOT_STORED})
                with suppress(ValueError):
                    result.ok.remove(key)
                result.status = "error"
        if stored:
            inp.recorded = result
            encoded = encode_input(inp)
            inp.outbox_id = await outbox.add(conn, workspace_id=table.workspace_id, table_id=table.id,
                                             payload={"workflow_id": wid, "input": encoded})
            encoded["outbox_id"] = inp.outbox_id
    return records, stored, encoded


async def _record_run(state: AppState, wid: str, inp: PipelineInput, encoded: dict[str, Any]) -> None:
    """Record a computed create's run in Temporal after its answer (a background task),
    then drop its outbox row. At most :data:`RECORDING_IN_FLIGHT` at once per process:
    beyond that the write waits for its own recording (back-pressure on Temporal, never
    an unbounded backlog). A failed start leaves the outbox row to the relay."""
    async def record() -> None:
        assert state.temporal is not None
        try:
            await start_pipeline(state.temporal, workflow_id=wid, inp=inp, task_queue=state.settings.task_queue,
                                 eager=True, search_attributes=state.settings.temporal_search_attributes,
                                 encoded=encoded)
        except Exception as exc:  # Temporal unreachable: the relay starts it from the outbox
            log.warning("pipeline %s not recorded yet: %s", wid, type(exc).__name__)
            return
        assert inp.outbox_id is not None
        _forget_soon(state, inp.outbox_id)

    if len(state.extras.get("recording", ())) >= RECORDING_IN_FLIGHT:
        await record()
    else:
        _in_background(state, "recording", record())
