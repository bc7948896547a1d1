"""Bulk runs (run-actions, schedules, backfills): a table's pipeline over many records, in chunks.

Never one workflow per record: each chunk of records is one PipelineWorkflow child run
(or, when every column of the run is a formula/parser, one ``pure_pipeline`` local
activity: load, evaluate and write the chunk set-wise), a bounded number at a time;
progress is written after each chunk so ``GET /runs/{id}`` can report it. Records are
paged by id, so a run over a filter sees a stable set.

Rows that fail are run again (``BulkInput.retries`` more times, only the columns that
failed for them) once every chunk has run: a transient failure (a service down for a
moment, a statement refused mid-schema-change) does not leave the row empty. Rows still
failing after that are counted in ``failed``, the first ``FAILURES_KEPT`` listed with
their errors by column, and the run ends ``completed_with_errors`` — ``completed`` means
every row succeeded.

A chunk that runs as a pipeline workflow carries what its steps read and return through
its Temporal history, so its rows are also bounded by bytes: each page of ids is split
into runs whose estimated reads (``record_costs``, activities.ledger.row_cost) stay within
``RUN_PLAN_BYTES`` (a row over it alone runs alone; the run itself fails what would not
fit, workflows/pipeline.py). Fused chunks carry no values through Temporal.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.ledger import RUN_PLAN_BYTES, runs_by_bytes
    from activities.types import (
        BulkInput,
        CostInput,
        FusedInput,
        PageInput,
        PipelineInput,
        PipelineResult,
        ProgressInput,
    )
    from workflows.pipeline import LOCAL_RETRY as PURE_RETRY
    from workflows.pipeline import PipelineWorkflow, _all_pure, _failure_message

LOCAL = timedelta(seconds=60)
RETRY = RetryPolicy(maximum_attempts=5, initial_interval=timedelta(milliseconds=200))
FAILURES_KEPT = 100  # failed rows listed with their errors (the count covers them all)
ALL = "*"  # a retry group's key: every column of the run (the failure named none)
BY_BYTES = "bulk-chunks-by-bytes"  # workflow.patched: chunks split by the bytes their runs carry
CONTINUES = "bulk-continue-as-new"  # workflow.patched: a run continues as new every chunks_per_run chunks
AHEAD = 4  # chunks paged ahead of the running ones, per concurrent slot (with CONTINUES)


@workflow.defn(name="BulkRunWorkflow")
class BulkRunWorkflow:
    def __init__(self) -> None:
        self.done = 0
        self.failed = 0
        self.pending: dict[tuple[str, ...], list[int]] = {}

    @workflow.run
    async def run(self, inp: BulkInput) -> dict[str, int]:
        self.inp = inp
        resume = inp.resume or {}  # a continued run: what the runs before it counted
        self.done = int(resume.get("done", 0))
        self.failed = int(resume.get("failed", 0))
        self.failures: list[dict[str, Any]] = list(resume.get("failures", []))
        # failed columns (sorted names, or ALL) → record ids to run again
        self.pending: dict[tuple[str, ...], list[int]] = {}
        self.sem = asyncio.Semaphore(max(1, inp.concurrency))
        self.lock = asyncio.Lock()
        self.names = {c.name: c.id for c in inp.table.columns}
        self.n = int(resume.get("n", 0))  # chunks started by this run and the ones before (child ids)
        # runs started before these changes replay as they ran: no retry pass, child
        # workflows for every chunk (workflow.patched records the choice in new histories)
        self.retries = inp.retries if workflow.patched("bulk-retry-failed-rows") else 0
        self.fused = workflow.patched("bulk-fused-pure-chunks")
        # runs started before this change chunked by rows alone (a chunk of large rows could
        # pass what a workflow history carries, and its child was terminated)
        self.by_bytes = not _all_pure(inp, {c.id: c for c in inp.table.columns}) and workflow.patched(BY_BYTES)
        # runs started before this change ran every chunk in one history, which Temporal
        # ends at 51,200 events or 50 MB (about 870,000 rows of an http column)
        per_run = max(1, inp.chunks_per_run) if workflow.patched(CONTINUES) else 0
        last = self.retries <= 0
        tasks: list[asyncio.Task[None]] = []
        started = 0
        if inp.record_ids is not None:
            at = int(resume.get("offset", 0))
            while at < len(inp.record_ids):
                if per_run and started >= per_run:
                    await self._continue(tasks, {"offset": at})
                if per_run:
                    await self._room(tasks)
                for part in await self._split(inp.record_ids[at:at + inp.chunk], inp.levels):
                    tasks.append(asyncio.create_task(self._chunk(part, inp.levels, last)))
                    started += 1
                at += inp.chunk
        else:
            after = int(resume.get("after", 0))
            while True:
                if per_run and started >= per_run:
                    await self._continue(tasks, {"after": after})
                if per_run:
                    await self._room(tasks)
                ids: list[int] = await workflow.execute_local_activity(
                    "page_ids", PageInput(table=inp.table, filters=inp.filters, after_id=after, limit=inp.chunk),
                    start_to_close_timeout=LOCAL, retry_policy=RETRY, result_type=list,
                )
                if not ids:
                    break
                for part in await self._split(ids, inp.levels):
                    tasks.append(asyncio.create_task(self._chunk(part, inp.levels, last)))
                    started += 1
                after = ids[-1]
                if len(ids) < inp.chunk:
                    break
        await asyncio.gather(*tasks)
        await self._retry_pending()
        status = "completed_with_errors" if self.failed else "completed"
        errors = {"rows": self.failures, "count": self.failed} if self.failed else {}
        await workflow.execute_local_activity(
            "run_progress",
            ProgressInput(run_id=inp.run_id, done=self.done, failed=self.failed, status=status, errors=errors),
            start_to_close_timeout=LOCAL, retry_policy=RETRY,
        )
        return {"done": self.done, "failed": self.failed}

    async def _retry_pending(self) -> None:
        """The retry passes over the rows that failed so far (``BulkInput.retries``); rows
        failing in the last pass count as failed."""
        for attempt in range(self.retries):
            groups, self.pending = self.pending, {}
            if not groups:
                break
            last = attempt == self.retries - 1
            tasks = []
            for key in sorted(groups):
                ids = sorted(groups[key])
                levels = self._levels(key)
                for i in range(0, len(ids), self.inp.chunk):
                    for part in await self._split(ids[i:i + self.inp.chunk], levels):
                        tasks.append(asyncio.create_task(self._chunk(part, levels, last)))
            await asyncio.gather(*tasks)

    async def _room(self, tasks: list[asyncio.Task[None]]) -> None:
        """Page no further ahead than ``AHEAD`` chunks per concurrent slot: the paging loop
        ran ahead of the chunks, and every page's ids and costs went into the same workflow
        task. A million-row http backfill's first task (~1,600 pages in 8 s, 4.4 KB each)
        was then refused whole (``GrpcMessageTooLarge``) and the workflow terminated."""
        limit = AHEAD * max(1, self.inp.concurrency)
        await workflow.wait_condition(lambda: sum(1 for t in tasks if not t.done()) < limit)

    async def _continue(self, tasks: list[asyncio.Task[None]], where: dict[str, int]) -> NoReturn:
        """Continue as new after ``BulkInput.chunks_per_run`` chunks: the chunks started
        finish, the rows that failed in them get their retry passes here (so no list of ids
        rides into the next run's input), and the next run goes on from ``where`` with the
        counts and listed failures so far. Each run's history then holds at most about
        twice ``chunks_per_run`` chunks (first pass and retries), whatever the table's size."""
        await asyncio.gather(*tasks)
        await self._retry_pending()
        resume = {**where, "done": self.done, "failed": self.failed, "failures": self.failures, "n": self.n}
        workflow.continue_as_new(dataclasses.replace(self.inp, resume=resume))

    async def _split(self, ids: list[int], levels: list[list[int]]) -> list[list[int]]:
        """A chunk's ids in runs whose estimated reads stay within ``RUN_PLAN_BYTES``."""
        if not self.by_bytes or not ids:
            return [ids]
        costs: list[list[int]] = await workflow.execute_local_activity(
            "record_costs", CostInput(table=self.inp.table, levels=levels, record_ids=ids),
            start_to_close_timeout=LOCAL, retry_policy=RETRY, result_type=list,
        )
        return runs_by_bytes([(int(rid), int(n)) for rid, n in costs], max_rows=len(ids), max_bytes=RUN_PLAN_BYTES)

    def _levels(self, key: tuple[str, ...]) -> list[list[int]]:
        """The run's levels restricted to the columns named by a retry group."""
        if ALL in key:
            return self.inp.levels
        wanted = {self.names[n] for n in key if n in self.names}
        levels = [[cid for cid in level if cid in wanted] for level in self.inp.levels]
        return [level for level in levels if level] or self.inp.levels

    async def _chunk(self, ids: list[int], levels: list[list[int]], last: bool) -> None:
        """Run ``levels`` over ``ids``; count the rows that succeeded, and those that
        failed as failed (``last``) or to run again."""
        inp = self.inp
        async with self.sem:
            n = self.n
            self.n += 1
            child = PipelineInput(
                table=inp.table, record_ids=ids, mode=inp.mode, levels=levels, caller=inp.caller,
                time_budget_s=inp.time_budget_s, step_budget=inp.step_budget,
                dependants=inp.dependants, bulk_run_id=inp.run_id,
            )
            failed: dict[str, dict[str, str]] = {}
            ok = 0
            try:
                res = await self._run_chunk(child, f"{inp.run_id}/chunk-{n}")
                failed = {rid: dict(o.errors) for rid, o in res.records.items() if o.status == "error"}
                ok = len(res.ok)
            except Exception as exc:
                message = _failure_message(exc)
                failed = {str(rid): {"_pipeline": message} for rid in ids}
            async with self.lock:
                self.done += ok
                for rid, errors in failed.items():
                    if not rid.isdigit():
                        continue
                    if last:
                        self.failed += 1
                        if len(self.failures) < FAILURES_KEPT:
                            self.failures.append({"id": int(rid), "errors": errors})
                    else:
                        known = [name for name in errors if name in self.names]
                        key = tuple(sorted(known)) if len(known) == len(errors) else (ALL,)
                        self.pending.setdefault(key, []).append(int(rid))
                await workflow.execute_local_activity(
                    "run_progress", ProgressInput(run_id=inp.run_id, done=self.done, failed=self.failed),
                    start_to_close_timeout=LOCAL, retry_policy=RETRY,
                )
                workflow.set_current_details(self._details())

    def _details(self) -> str:
        """The Temporal UI's "current details" of the run (also ``GET {rest}/runs/{id}``)."""
        retrying = sum(len(ids) for ids in self.pending.values())
        return f"run {self.inp.run_id}: {self.done} row(s) done, {self.failed} failed, {retrying} to retry"

    @workflow.query(name="progress")
    def progress(self) -> dict[str, int]:
        """``temporal workflow query --name progress``: rows done, failed and waiting for a retry."""
        return {"done": self.done, "failed": self.failed,
                "retrying": sum(len(ids) for ids in self.pending.values())}

    async def _run_chunk(self, child: PipelineInput, wid: str) -> PipelineResult:
        if self.fused and _all_pure(child, {c.id: c for c in child.table.columns}):
            # formulas and parsers only: one local activity loads the chunk with one
            # SELECT, evaluates every level and writes with one UPDATE (no child workflow)
            return await workflow.execute_local_activity(
                "pure_pipeline", FusedInput(pipeline=child, run_id=wid, now=workflow.now().isoformat()),
                start_to_close_timeout=timedelta(seconds=max(10.0, min(60.0, child.time_budget_s * 2))),
                retry_policy=PURE_RETRY, result_type=PipelineResult,
                summary=f"{len(child.record_ids)} record(s)",
            )
        return await workflow.execute_child_workflow(
            PipelineWorkflow.run, child, id=wid,
            execution_timeout=timedelta(seconds=child.time_budget_s * 2 + 60),
        )
