"""The record pipeline: one workflow over a batch of records of one table (DESIGN §5).

Levels of computed columns run in order; the columns of a level run concurrently, each
as one step over every record of the batch. A failed step stores an error for its
column and skips its dependants; it never fails the write. Budgets per row (time and
steps, from the plan) end a row with ``budget_exceeded`` on the columns left.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.ledger import (
        BUDGET_EXCEEDED,
        MORE_KEY,
        RUN_HISTORY_MAX_BYTES,
        STEP_INPUT_MAX_BYTES,
        TASK_MAX_BYTES,
        UNLOADED_KEY,
        Ledger,
        input_too_large,
        run_columns,
        run_history_full,
        run_reads,
    )
    from activities.types import (
        FusedInput,
        LoadInput,
        PipelineInput,
        PipelineResult,
        StepInput,
        StepResult,
        TableSnap,
        WriteInput,
    )

PURE_KINDS = {"formula", "json_parser"}
RECORD_KINDS = {"create_record", "update_record", "delete_record", "fetch_records"}
REMOTE_KINDS = {"http_request": "http_step", "action": "action_step", "ai_agent": "ai_step"}
LOCAL_TIMEOUT = timedelta(seconds=30)
LOCAL_RETRY = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(milliseconds=50))
# Remote steps retry transient HTTP failures per record inside the activity (so a batch
# never re-sends the records that succeeded); this policy covers the activity as a whole
# (a lost worker, an activity timeout). Idempotency keys are the same on every attempt.
REMOTE_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=5),
    maximum_attempts=3,
    non_retryable_error_types=["StepError"],
)
MAX_LOOP_ITEMS = 1000  # a longer list fails the row's loop column (docs/api.md "Computed columns")
# Versioning (workflow.patched): before this id a longer list was cut to its first
# MAX_LOOP_ITEMS items and looped; a history recorded then replays that way.
LOOP_LIMIT_FAILS = "loop-over-limit-fails"
# Before this id a step's input held every record of its batch however large (over 2 MiB
# Temporal refused it and the workflow task failed until the run's budget ran out); now
# the batch goes in sub-batches that fit and a record that cannot fit alone fails that
# step (docs/decisions.md). patched() is asked only when an input is over the limit.
STEP_INPUTS_FIT = "step-inputs-fit"
# Before this id a run recorded whatever its loads and steps carried: 70 loads of 800 KB
# in one workflow task (one gRPC request over 4 MiB) or 60 MB of step inputs, and the
# server terminated the workflow (a batch's answer then said "running" for ever, a bulk
# chunk failed every row with "Terminated"). Now a run waits for a new workflow task
# (a 1 ms timer) before a load or step that would take the task's upload past
# TASK_MAX_BYTES, and does not run a step that would take its history past
# RUN_HISTORY_MAX_BYTES: those records fail it, naming the limit (docs/decisions.md).
# patched() is asked only when one of those limits would be passed.
RUN_HISTORY_BOUNDED = "run-history-bounded"
# the most a local activity's result may take: a step's are capped to STEP_INPUT_MAX_BYTES
# (activities/http_request.py fit_result, the same figure), a load's too; the rest is room
# for the envelope (errors, the write-back guard's digests, the ids of the next load)
LOCAL_RESULT_MAX = STEP_INPUT_MAX_BYTES + 128 * 1024
# a formula/parser step's share of a workflow task's upload (StepInput.max_result_bytes),
# and what it reserves with it (its errors are within the share too): six run side by side
# before a task is full; records whose values pass it run again with the whole limit
PURE_SHARE = 480 * 1024
PURE_RESERVED = PURE_SHARE + 32 * 1024
FLUSH = timedelta(milliseconds=1)
GUARDS_KEY = "_guards"  # activities.records_io.GUARDS_KEY (workflows import no activity module)


@workflow.defn(name="PipelineWorkflow")
class PipelineWorkflow:
    @workflow.run
    async def run(self, inp: PipelineInput) -> PipelineResult:
        self.inp = inp
        self.start = workflow.now()
        self.cols = {c.id: c for c in inp.table.columns}
        self.by_name = {c.name: c for c in inp.table.columns}
        if inp.recorded is not None:
            # a create computed its columns before its INSERT and stored them with their
            # outcomes (api/services/pipelines.py create_computed): the run is that result
            return inp.recorded
        if inp.write and _all_pure(inp, self.cols):
            # the common case, formulas and parsers only: load, evaluate every level and
            # write in ONE local activity (same rules, see activities/ledger.py)
            return await workflow.execute_local_activity(
                "pure_pipeline",
                FusedInput(pipeline=inp, run_id=workflow.info().workflow_id, now=self.start.isoformat()),
                start_to_close_timeout=timedelta(seconds=max(1.0, min(30.0, inp.time_budget_s))),
                retry_policy=LOCAL_RETRY,
                result_type=PipelineResult,
                summary=f"{sum(len(level) for level in inp.levels)} formula/parser column(s)",
            )
        # what the run's values derive from, as read (storage/guards.py): the write-back
        # stores only those still derived from what the rows hold (absent from histories
        # recorded before the guard: the write is then unguarded, as it was)
        self.carried = 0  # bytes of payloads the run recorded in its history, or reserved for results
        self.task_mark = -1  # the history length at the current workflow task's start
        self.task_bytes = 0  # bytes of payloads the current workflow task uploads
        self.outstanding = 0  # loads and steps whose results are still to come
        self.flush: tuple[int, Any] | None = None  # (task, its timer) that starts the next task
        self.dropped: list[str] = []  # records not loaded: the run's history would be full
        self.fields, guard = await self._load()
        self.ledger = Ledger(inp, [*self.fields, *self.dropped])
        for rid in self.dropped:  # every column fails, naming the limit
            self.fields[rid] = {"id": int(rid)}
            for cid in self.cols:
                if any(cid in level for level in inp.levels):
                    self.ledger.errors[rid][self.cols[cid].name] = run_history_full(self.carried)
                    self.ledger.values[rid][cid] = None
                    self.ledger.blocked[rid].add(cid)
        self.children: list[Any] = []
        for level in inp.levels:
            await asyncio.gather(*(self._column(cid) for cid in level if cid in self.cols))
        if self.children:
            await asyncio.gather(*self.children)
        result, updates = self.ledger.result(workflow.info().workflow_id)
        if inp.write and updates:
            await workflow.execute_local_activity(
                "write_results",
                WriteInput(table=inp.table, updates=updates, bulk_run_id=inp.bulk_run_id, guard=guard),
                start_to_close_timeout=LOCAL_TIMEOUT,
                retry_policy=LOCAL_RETRY,
            )
        return result

    async def _load(self) -> tuple[dict[str, dict[str, Any]], dict[str, Any] | None]:
        """The records' fields the run's steps read, and the write-back guard.

        A load hands back at most ``STEP_INPUT_MAX_BYTES`` of fields (one Temporal
        payload); the records left over are loaded next, in order. Fields of a record too
        large to load even alone are listed in ``self.unloaded`` (name → bytes). Histories
        recorded before loads were limited hold one load of everything, and replay so."""
        inp = self.inp
        self.unloaded: dict[str, dict[str, int]] = {}
        fields: dict[str, dict[str, Any]] = {}
        guard: dict[str, Any] | None = None
        ids = inp.record_ids
        while True:
            if not await self._room(LOCAL_RESULT_MAX, LOCAL_RESULT_MAX):
                self.dropped = [str(i) for i in ids]
                return fields, guard
            got: dict[str, Any] = await workflow.execute_local_activity(
                "load_records",
                LoadInput(table=inp.table, record_ids=ids, levels=inp.levels if inp.write else None,
                          fields=self._run_reads(), max_bytes=STEP_INPUT_MAX_BYTES),
                start_to_close_timeout=LOCAL_TIMEOUT,
                retry_policy=LOCAL_RETRY,
                result_type=dict,
            )
            self._settle(LOCAL_RESULT_MAX, _size(got))
            page_guard = got.pop(GUARDS_KEY, None)
            more = got.pop(MORE_KEY, None)
            self.unloaded.update(got.pop(UNLOADED_KEY, None) or {})
            fields.update(got)
            if guard is None:
                guard = page_guard
            elif page_guard is not None:
                guard["rows"] = {**guard.get("rows", {}), **page_guard.get("rows", {})}
            if not more:
                return fields, guard
            ids = more

    def _reads(self, cid: int) -> set[str] | None:
        """The fields a step of column ``cid`` reads (None: any; a loop's sub-step too)."""
        reads = self.cols[cid].reads
        return None if reads is None else {*reads, "id"}

    def _run_reads(self) -> list[str] | None:
        """The fields any step of the run reads (None: every one)."""
        run = run_columns(self.inp.table.columns, self.inp.levels)
        reads = run_reads(run)
        return None if reads is None else sorted({*reads, "id"} if run else reads)

    # ------------------------------------------------------------------ history
    def _task(self) -> int:
        """Bytes the current workflow task uploads so far (a new task starts at 0)."""
        mark = workflow.info().get_current_history_length()
        if mark != self.task_mark:
            self.task_mark, self.task_bytes = mark, 0
        return self.task_bytes

    async def _room(self, task: int, history: int) -> bool:
        """Reserve ``task`` bytes of the current workflow task's upload (waiting for a new
        task when they would not fit beside what it uploads already) and ``history``
        bytes of the run's history (waiting for the results on their way, whose room is
        reserved at their most, when they would not fit beside them). False, reserving
        nothing: they cannot fit in the history even then."""
        while self.carried + history > RUN_HISTORY_MAX_BYTES and workflow.patched(RUN_HISTORY_BOUNDED):
            if not self.outstanding:
                return False
            await workflow.wait_condition(
                lambda: not self.outstanding or self.carried + history <= RUN_HISTORY_MAX_BYTES)
        self.carried += history
        self.outstanding += 1
        while self._task() and self.task_bytes + task > TASK_MAX_BYTES and workflow.patched(RUN_HISTORY_BOUNDED):
            await self._next_task()
        self.task_bytes += task
        return True

    async def _next_task(self) -> None:
        """Wait for a new workflow task: the current one completes with what it has, and a
        1 ms timer (one for every step waiting in this task) starts the next."""
        if self.flush is None or self.flush[0] != self.task_mark:
            self.flush = (self.task_mark, asyncio.ensure_future(workflow.sleep(FLUSH)))
        await self.flush[1]

    def _settle(self, reserved: int, actual: int, *, task: bool = True) -> None:
        """A load's or step's result took ``actual`` bytes of the ``reserved`` (of the
        current task's upload too when ``task``: a local activity's)."""
        self.carried += actual - reserved
        self.outstanding -= 1
        if task and workflow.info().get_current_history_length() == self.task_mark:
            self.task_bytes += actual - reserved

    # ------------------------------------------------------------------ budgets
    def _remaining_s(self) -> float:
        return self.inp.time_budget_s - (workflow.now() - self.start).total_seconds()

    def _eligible(self, cid: int, cost: int = 1) -> list[str]:
        return self.ledger.eligible(cid, over_time=self._remaining_s() <= 0, cost=cost)

    def _apply(self, cid: int, result: StepResult, rids: list[str]) -> None:
        self.ledger.apply(cid, rids, result.values, result.errors, self.fields)
        for child in result.children:
            self._child(child)

    # ------------------------------------------------------------------ steps
    async def _column(self, cid: int) -> None:
        col = self.cols[cid]
        kind = col.type
        if col.broken:  # a column it read was deleted with force: null, and say why
            rids = self._eligible(cid)
            for r in rids:
                self.ledger.record(r, cid, None, self.fields)
                self.ledger.fail(r, cid, col.broken)
            return
        if kind == "delay":
            await self._delay(cid)
            return
        if kind == "loop":
            await self._loop(cid)
            return
        rids = self._eligible(cid)
        if not rids:
            return
        result = await self._step(cid, rids)
        self._apply(cid, result, rids)

    async def _step(
        self, cid: int, rids: list[str], override: dict[str, Any] | None = None,
        items: dict[str, Any] | None = None, suffix: str = "",
    ) -> StepResult:
        reads = self._reads(cid)
        records = {r: self._input(r, reads) for r in rids}
        missing = {r: n for r in rids if (n := self._missing(r, reads))}
        if (missing or _size(records) + (_size(items) if items is not None else 0) > STEP_INPUT_MAX_BYTES) \
                and workflow.patched(STEP_INPUTS_FIT):
            # over what one Temporal payload carries: the batch goes in sub-batches that
            # fit; a record that cannot fit even alone fails this step, saying why
            batches, errors = _fit(rids, records, items, missing)
            results = []
            for batch in batches:  # one at a time: each input is up to the limit
                results.append(await self._call(
                    cid, batch, {r: records[r] for r in batch}, override,
                    None if items is None else {r: items.get(r) for r in batch}, suffix))
            out = StepResult(errors=errors)
            for res in results:
                out.absorb(res)
            return out
        return await self._call(cid, rids, records, override, items, suffix)

    def _input(self, rid: str, reads: set[str] | None) -> dict[str, Any]:
        fields = self.fields[rid]
        return fields if reads is None else {k: v for k, v in fields.items() if k in reads}

    def _missing(self, rid: str, reads: set[str] | None) -> int:
        """Bytes of the fields a step reads that ``rid`` could not load (too large)."""
        unloaded = self.unloaded.get(rid)
        if not unloaded:
            return 0
        return sum(n for name, n in unloaded.items() if reads is None or name in reads)

    async def _call(
        self, cid: int, rids: list[str], records: dict[str, dict[str, Any]],
        override: dict[str, Any] | None, items: dict[str, Any] | None, suffix: str, share: bool = True,
    ) -> StepResult:
        col = self.cols[cid]
        kind = (override or {}).get("type", col.type)
        step = StepInput(
            table=self.inp.table,
            column_id=cid,
            records=records,
            now=workflow.now().isoformat(),
            caller=self.inp.caller,
            step_key=f"{workflow.info().workflow_id}:{cid}{suffix}",
            depth=self.inp.depth,
            override=override,
            items=items,
            max_result_bytes=PURE_SHARE if share and kind in PURE_KINDS else None,
        )
        if kind in REMOTE_KINDS:  # its input is recorded now, its result when it comes
            size = _size(step)
            reserved, task = size + LOCAL_RESULT_MAX, size
        elif kind in PURE_KINDS and share:  # its result alone, now, within its share
            reserved = task = PURE_RESERVED
        elif kind in PURE_KINDS or kind in RECORD_KINDS:  # its result alone, now
            reserved = task = LOCAL_RESULT_MAX
        else:
            return StepResult(errors={r: f"unsupported step kind {kind!r}" for r in rids})
        if not await self._room(task, reserved):
            return StepResult(errors={r: run_history_full(self.carried) for r in rids})
        result = await self._run_step(cid, kind, step, rids)
        if kind in REMOTE_KINDS:
            self._settle(LOCAL_RESULT_MAX, _size(result), task=False)
        else:
            self._settle(reserved, _size(result))
        if result.over:  # values past the share (only a share asks for this): the whole limit now
            over = [r for r in rids if r in set(result.over)]
            again = await self._call(cid, over, {r: records[r] for r in over}, override,
                                     None if items is None else {r: items.get(r) for r in over}, suffix, share=False)
            result.absorb(again)
            result.over = []
        return result

    async def _run_step(self, cid: int, kind: str, step: StepInput, rids: list[str]) -> StepResult:
        col = self.cols[cid]
        remaining = max(0.5, self._remaining_s())
        summary = f"{col.name} ({kind})"
        try:
            if kind in PURE_KINDS or kind in RECORD_KINDS:
                return await workflow.execute_local_activity(
                    "record_step" if kind in RECORD_KINDS else "pure_step",
                    step,
                    start_to_close_timeout=timedelta(seconds=min(30.0, remaining)),
                    retry_policy=LOCAL_RETRY,
                    result_type=StepResult,
                    summary=summary,
                )
            if kind in REMOTE_KINDS:
                return await workflow.execute_activity(
                    REMOTE_KINDS[kind],
                    step,
                    start_to_close_timeout=timedelta(seconds=min(60.0, remaining)),
                    schedule_to_close_timeout=timedelta(seconds=remaining),
                    retry_policy=REMOTE_RETRY,
                    result_type=StepResult,
                    summary=summary,
                )
        except Exception as exc:  # noqa: BLE001 - activity failed after its retries (or timed out)
            message = _failure_message(exc)
            if self._remaining_s() <= 0:
                message = BUDGET_EXCEEDED
            return StepResult(errors={r: message for r in rids})
        return StepResult(errors={r: f"unsupported step kind {kind!r}" for r in rids})

    async def _delay(self, cid: int) -> None:
        col = self.cols[cid]
        rids = self._eligible(cid)
        if not rids:
            return
        try:
            seconds = float(col.config.get("seconds", 0))
        except (TypeError, ValueError):
            seconds = -1
        if not 0 <= seconds <= 366 * 86400:  # storage.pipelines.DELAY_MAX_S (checked at column creation too)
            for rid in rids:
                self.ledger.fail(rid, cid, "delay needs config.seconds between 0 and 31,622,400")
            return
        remaining = self._remaining_s()
        if seconds > remaining:
            # the row would outlive its budget: wait out the budget, then stop it
            await workflow.sleep(max(0.0, remaining))
            for rid in rids:
                self.ledger.exceed(rid, cid)
            return
        if seconds > 0:
            await workflow.sleep(seconds)
        done = workflow.now().isoformat()
        for rid in rids:
            self.ledger.record(rid, cid, done, self.fields)

    async def _loop(self, cid: int) -> None:
        col = self.cols[cid]
        source = col.config.get("source_column")
        sub = col.config.get("step")
        rids = self._eligible(cid, cost=0)
        if not isinstance(sub, dict) or not isinstance(sub.get("type"), str) or sub.get("type") in ("loop", "delay"):
            for rid in rids:
                self.ledger.fail(rid, cid, "loop needs config.step {type, config} of a step kind other than loop/delay")
            return
        lists: dict[str, list[Any]] = {}
        for rid in rids:
            items = self.fields[rid].get(source) if isinstance(source, str) else None
            if items is None:
                items = []
            if not isinstance(items, list):
                items = [items]
            # A list over the limit fails the row instead of losing its tail silently. That
            # changes the commands (no iterations for that row), so runs recorded before
            # keep cutting the list on replay; patched() is asked only when a list is over
            # the limit, the only case where the two versions differ.
            if len(items) > MAX_LOOP_ITEMS and workflow.patched(LOOP_LIMIT_FAILS):
                self.ledger.fail(rid, cid, f"the list has {len(items):,} items; a loop runs at most {MAX_LOOP_ITEMS:,}")
                continue
            lists[rid] = items[:MAX_LOOP_ITEMS]
        rids = [rid for rid in rids if rid in lists]
        results: dict[str, list[Any]] = {rid: [] for rid in rids}
        longest = max((len(v) for v in lists.values()), default=0)
        active = list(rids)
        for i in range(longest):
            batch = []
            for rid in active:
                if i >= len(lists[rid]):
                    continue
                # each iteration is one step of the row's budget
                if self.ledger.steps[rid] + 1 > self.inp.step_budget or self._remaining_s() <= 0:
                    self.ledger.exceed(rid, cid)
                    continue
                self.ledger.steps[rid] += 1
                batch.append(rid)
            active = [r for r in active if col.name not in self.ledger.errors[r]]
            if not batch:
                continue
            res = await self._step(
                cid, batch, override=sub, items={r: lists[r][i] for r in batch}, suffix=f":{i}"
            )
            for rid in batch:
                if rid in res.errors:
                    self.ledger.fail(rid, cid, f"item {i}: {res.errors[rid]}")
                else:
                    results[rid].append(res.values.get(rid))
            for child in res.children:
                self._child(child)
            active = [r for r in active if col.name not in self.ledger.errors[r]]
        for rid in rids:
            if col.name not in self.ledger.errors[rid]:
                self.ledger.record(rid, cid, results[rid], self.fields)

    def _child(self, child: dict[str, Any]) -> None:
        """Run the pipelines of records a step wrote, as child workflows (bounded depth)."""
        used = max(self.ledger.steps.values(), default=0)
        budget = self.inp.step_budget - used
        if budget <= 0 or not child.get("levels") or self.inp.depth + 1 > self.inp.step_budget:
            return
        table = TableSnap(**child["table"]) if isinstance(child["table"], dict) else child["table"]
        inp = PipelineInput(
            table=table,
            record_ids=child["record_ids"],
            mode=child["mode"],
            levels=child["levels"],
            caller=self.inp.caller,
            time_budget_s=max(1.0, self._remaining_s()),
            step_budget=budget,
            depth=self.inp.depth + 1,
            dependants=child.get("dependants", {}),
        )
        wid = f"{workflow.info().workflow_id}/child-{len(self.children)}"
        self.children.append(
            workflow.execute_child_workflow(
                PipelineWorkflow.run, inp, id=wid,
                execution_timeout=timedelta(seconds=max(1.0, self._remaining_s()) + 5),
            )
        )


def _all_pure(inp: PipelineInput, cols: dict[int, Any]) -> bool:
    kinds = {cols[cid].type for level in inp.levels for cid in level if cid in cols}
    return bool(kinds) and kinds <= PURE_KINDS


def _size(value: Any) -> int:
    """Bytes of ``value`` as Temporal's JSON converter encodes it (non-ASCII escaped)."""
    return len(workflow.payload_converter().to_payloads([value])[0].data)


def _fit(
    rids: list[str], records: dict[str, dict[str, Any]], items: dict[str, Any] | None, missing: dict[str, int],
) -> tuple[list[list[str]], dict[str, str]]:
    """``rids`` in sub-batches (in order) whose records (and loop items) fit in
    ``STEP_INPUT_MAX_BYTES``, and the error of each record that cannot fit even alone
    (or could not be loaded whole: ``missing`` bytes)."""
    envelope = 4 if items is not None else 2  # {} (and the items' {})
    batches: list[list[str]] = []
    errors: dict[str, str] = {}
    current: list[str] = []
    used = envelope
    for rid in rids:
        key = _size(rid) + 2  # "rid": and a comma
        size = key + _size(records[rid]) + (key + _size(items.get(rid)) if items is not None else 0)
        if missing.get(rid) or envelope + size > STEP_INPUT_MAX_BYTES:
            errors[rid] = input_too_large(size - key + missing.get(rid, 0))
            continue
        if current and used + size > STEP_INPUT_MAX_BYTES:
            batches.append(current)
            current, used = [], envelope
        current.append(rid)
        used += size
    if current:
        batches.append(current)
    return batches, errors


def _failure_message(exc: BaseException) -> str:
    """The innermost application error message of an activity failure."""
    cause: BaseException | None = exc
    message = str(exc)
    while cause is not None:
        found = getattr(cause, "message", None)
        if found:
            message = str(found)
        cause = cause.__cause__
    return message or type(exc).__name__
