"""Formulas off the event loop (issue #22): the cost of evaluating formulas in the
sandbox processes (:mod:`activities.sandbox`) instead of on the API's event loop, on the
``pipelines`` scenarios' 3-chained-formula table, in the same run.

Three fresh single-worker API processes, each on its own task queue, differing only in
``WDS_FORMULA_INLINE``: ``cheap`` (the default: cheap formulas inline under the slice, the
rest in the sandbox), ``never`` (every formula in the sandbox) and ``always`` (every
formula inline on the event loop, unsliced, as before the budgets: the baseline). The
``never`` figures are why cheap formulas stay inline. All three run with
``WDS_PIPELINE_SQL_ARITHMETIC=false``: the table's formulas are plain arithmetic, which
PostgreSQL would otherwise compute in the INSERT, and none of the three would evaluate
anything.

* single create with the pipeline, sequential, p50 beside the inline process's —
  target: overhead ≤ 10 %;
* batches of 500 rows with the pipeline, rows/s beside the inline process's — target
  ≥ 90 %.

How it stays honest on a loaded 2-core machine: the measurement is cut into ``ROUNDS``
rounds (at least 7, an odd count so the median is a real round); inside a round the three
processes take turns request by request (creates) or call by call (batches), the order
reversed every turn (A B C, C B A, ...), so a burst of foreign load lands on every mode
alike. Each round gives one ratio per mode against the inline process; the figure is the
median round's (its own two measured numbers) and the note gives the ratios' min–max and
the pooled ratio over every round. Beside the wall-clock figures, the CPU each API process
(with its sandbox children) used per record over the same turns: much less sensitive to
the machine's load than latency, it shows what the sandbox path costs the server.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import secrets
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from bench.context import BenchContext, NotMeasurable, inverse_ms, not_measured
from bench.load import FAILURES, Operation, OperationFailed, Percentiles, http_send, run_phase
from bench.report import Figure, Target
from bench.scenarios.pipelines import BATCH, _check_record, formula_table
from bench.scenarios.registry import scenario

MAX_OVERHEAD = 1.1
CREATE_TARGET = Target(1 / MAX_OVERHEAD, f"p50 ≤ {MAX_OVERHEAD:g}× inline")
BATCH_TARGET = Target(1 / MAX_OVERHEAD, "≥ 90 % of inline rows/s")
WARMUP_S = 2.0
MIN_ROUNDS = 7
MODES = ("cheap", "never", "always")  # the last is the baseline
LABELS = {"cheap": "default (cheap formulas inline, sliced)", "never": "every formula in the sandbox"}


def _create_op(ctx: BenchContext, rest: str, table_id: int) -> Operation:
    url = f"{rest}/tables/{table_id}/records"
    payloads = itertools.cycle([json.dumps({"fields": {"A": i}}).encode() for i in range(1000)])

    async def op() -> None:
        body = await http_send(ctx.session, "POST", url, ctx.headers, next(payloads), expect=(201,))
        if b'"status":"ok"' not in body:
            raise OperationFailed(f"pipeline not ok: {body[:300]!r}")

    return op


def _batch_ops(ctx: BenchContext, rest: str, table_id: int, rows: list[dict[str, Any]]) -> list[Operation]:
    url = f"{rest}/tables/{table_id}/records/batch"
    ops: list[Operation] = []
    for start in range(0, len(rows), BATCH):
        chunk = rows[start:start + BATCH]
        payload = json.dumps({"rows": [{"fields": {"A": r["Score"]}} for r in chunk]}).encode()

        async def op(payload: bytes = payload, n: int = len(chunk)) -> None:
            body = json.loads(await http_send(ctx.session, "POST", url, ctx.headers, payload, expect=(200,)))
            results = body["results"]
            if len(results) != n or body.get("pipeline", {}).get("status") != "ok":
                raise OperationFailed(f"rows rejected or pipeline not ok: {str(body)[:300]}")
            _check_record(results[-1]["record"])

        ops.append(op)
    return ops


def _task_cpu_s(pid: int) -> float | None:
    """CPU seconds of every thread of a process from ``/proc/<pid>/task/*/schedstat``
    (nanoseconds: ``/proc/<pid>/stat`` counts 10 ms ticks, too coarse for one round's
    batches); ``None`` where schedstat is not available."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as fh:
                total += int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process and its live descendants (the sandbox and V8 children);
    0 for a process that is gone."""
    total = 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    for proc in procs:
        precise = _task_cpu_s(proc.pid)
        if precise is not None:
            total += precise
            continue
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


@dataclass
class Turns(Percentiles):
    """What one mode got over one round: latencies of its calls, records written, CPU."""

    latencies: list[float] = field(default_factory=list)
    records: int = 0
    errors: int = 0
    first_error: str | None = None
    cpu_s: float = 0.0


    @property
    def rows_per_s(self) -> float | None:
        busy = sum(self.latencies)
        return self.records / busy if busy > 0 else None

    @property
    def cpu_ms_per_record(self) -> float | None:
        return self.cpu_s * 1000 / self.records if self.records else None


async def run_round(calls: list[list[tuple[Operation, int]]], pids: list[int], *,
                    until: float | None = None) -> list[Turns]:
    """One round: the modes' calls (operation, records it writes) in turns, the order
    reversed each turn, until the calls or the time (``until``, a ``perf_counter`` instant,
    checked every second turn) run out; each mode's API process tree's CPU over the round."""
    turns = [Turns() for _ in calls]
    cpu0 = [tree_cpu_s(pid) for pid in pids]
    order = list(range(len(calls)))
    for step in range(max(len(c) for c in calls)):
        if until is not None and step % 2 == 0 and time.perf_counter() >= until:
            break
        for i in (order if step % 2 == 0 else order[::-1]):
            if step >= len(calls[i]):
                continue
            op, n = calls[i][step]
            t0 = time.perf_counter()
            try:
                await op()
            except FAILURES as exc:
                turns[i].errors += 1
                turns[i].first_error = turns[i].first_error or f"{type(exc).__name__}: {exc}"[:300]
                continue
            turns[i].latencies.append(time.perf_counter() - t0)
            turns[i].records += n
    for i, pid in enumerate(pids):
        turns[i].cpu_s = tree_cpu_s(pid) - cpu0[i]
    return turns


def merge(turns: list[Turns]) -> Turns:
    out = Turns()
    for t in turns:
        out.latencies += t.latencies
        out.records += t.records
        out.errors += t.errors
        out.cpu_s += t.cpu_s
        out.first_error = out.first_error or t.first_error
    return out


def _ratio(value: float | None, base: float | None) -> float | None:
    return value / base if value is not None and base else None


def paired_figure(
    name: str, rounds: list[tuple[Turns, Turns]], *, unit: str, rate: Callable[[Turns], float | None],
    target: Target | None, what: str, note: str, latencies: bool = True,
) -> Figure:
    """The median round's figure (by ``rate`` ratio, mode ÷ inline; higher is better), the
    spread of the rounds' ratios and the pooled ratio in the note."""
    ratios = [(r, i) for i, (m, b) in enumerate(rounds) if (r := _ratio(rate(m), rate(b))) is not None]
    pooled_m, pooled_b = merge([m for m, _ in rounds]), merge([b for _, b in rounds])
    errors = pooled_m.errors
    if not ratios:
        return Figure(scenario="pipelines.sandbox", name=name, unit=unit, value=None, target=target,
                      errors=errors, note=f"not measured: {pooled_m.first_error or pooled_b.first_error}")
    ordered = sorted(ratios)
    _, median_i = ordered[(len(ordered) - 1) // 2]
    mode, base = rounds[median_i]
    pooled = _ratio(rate(pooled_m), rate(pooled_b))
    spread = (f"{what} of the median of {len(ratios)} rounds; rounds' ratios {ordered[0][0]:.3f}–"
              f"{ordered[-1][0]:.3f}, median {statistics.median(r for r, _ in ratios):.3f}"
              + (f", pooled {pooled:.3f}" if pooled is not None else ""))
    notes = [spread, note]
    if pooled_m.first_error:
        notes.append(f"first error: {pooled_m.first_error}")
    if pooled_b.first_error:
        notes.append(f"baseline error: {pooled_b.first_error}")
    return Figure(
        scenario="pipelines.sandbox", name=name, unit=unit, value=rate(mode), baseline=rate(base),
        baseline_label="inline", target=target, errors=errors, note="; ".join(notes),
        **({"p50_ms": mode.p50_ms, "p99_ms": mode.p99_ms, "baseline_p50_ms": base.p50_ms,
            "baseline_p99_ms": base.p99_ms} if latencies else {}),
    )


def _records_per_cpu_s(t: Turns) -> float | None:
    return t.records / t.cpu_s if t.cpu_s > 0 else None


IN_PYTHON = {"WDS_PIPELINE_SQL_ARITHMETIC": "false"}


@scenario("pipelines.sandbox", title="3 chained formulas: the default (cheap inline) and all-sandbox vs inline as before",
          target=f"overhead ≤ {(MAX_OVERHEAD - 1) * 100:.0f} % (create p50, batch rows/s)")
async def sandbox_overhead(ctx: BenchContext) -> list[Figure]:
    names = {m: (f"POST record with 3 chained formulas, sequential, {label} vs inline as before",
                 f"batch insert, {BATCH}/call, 3 formulas, {label} vs inline as before") for m, label in LABELS.items()}
    queue = secrets.token_hex(3)
    rounds = max(MIN_ROUNDS, ctx.config.rounds) | 1  # odd: the median is a measured round
    try:
        # the formulas are plain arithmetic, which PostgreSQL would compute in the INSERT
        # (WDS_PIPELINE_SQL_ARITHMETIC): off, so these APIs measure where the evaluator runs
        async with ctx.extra_api("formula-cheap", workers=1, WDS_FORMULA_INLINE="cheap", **IN_PYTHON,
                                 WDS_TASK_QUEUE=f"bench-cheap-{queue}") as cheap, \
                ctx.extra_api("formula-sandbox", workers=1, WDS_FORMULA_INLINE="never", **IN_PYTHON,
                              WDS_TASK_QUEUE=f"bench-sandbox-{queue}") as boxed, \
                ctx.extra_api("formula-inline", workers=1, WDS_FORMULA_INLINE="always", **IN_PYTHON,
                              WDS_TASK_QUEUE=f"bench-inline-{queue}") as inline:
            procs = (cheap, boxed, inline)
            pids = [p.proc.pid for p in procs]
            rests = [f"{p.base_url}/functions/v1/rest-api" for p in procs]
            create_table, batch_table = await formula_table(ctx, "sandbox1"), await formula_table(ctx, "sandbox500")
            creates = [_create_op(ctx, rest, create_table) for rest in rests]
            for op in creates:  # fresh processes: sandbox children, caches, pools
                await run_phase(op, concurrency=1, duration_s=WARMUP_S, max_ops=ctx.config.max_ops)
            # creates: rounds of equal wall time, each mode's turn one request
            create_rounds: list[list[Turns]] = []
            per_round_s = ctx.config.duration_s * len(MODES) / rounds
            cap = max(2, ctx.config.max_ops // rounds)
            for _ in range(rounds):
                create_rounds.append(await run_round([[(op, 1)] * cap for op in creates], pids,
                                                     until=time.perf_counter() + per_round_s))
            # batches: every mode writes ctx.rows in 500-row calls, split into the rounds
            batch_ops = [_batch_ops(ctx, rest, batch_table, ctx.rows) for rest in rests]
            sizes = [len(ctx.rows[s:s + BATCH]) for s in range(0, len(ctx.rows), BATCH)]
            per = max(1, math.ceil(len(sizes) / rounds))
            batch_rounds = [await run_round([list(zip(ops[s:s + per], sizes[s:s + per])) for ops in batch_ops], pids)
                            for s in range(0, len(sizes), per)]
    except NotMeasurable as exc:
        return [not_measured("pipelines.sandbox", name, str(exc), target=CREATE_TARGET)
                for pair in names.values() for name in pair]
    figures = []
    for i, mode in enumerate(MODES[:-1]):
        creates_of = [(r[i], r[-1]) for r in create_rounds]
        batches_of = [(r[i], r[-1]) for r in batch_rounds]
        figures.append(paired_figure(
            names[mode][0], creates_of, unit="/s (1÷p50)", rate=lambda t: inverse_ms(t.p50_ms), target=CREATE_TARGET,
            what="p50s", note=f"WDS_FORMULA_INLINE={mode} vs always, request by request, order reversed each turn"))
        figures.append(paired_figure(
            names[mode][1], batches_of, unit="rows/s", rate=lambda t: t.rows_per_s, target=BATCH_TARGET,
            what="rows/s", note=f"WDS_FORMULA_INLINE={mode} vs always, call by call, order reversed each turn"))
        for kind, pairs in (("create", creates_of), ("batch", batches_of)):
            figures.append(paired_figure(
                f"server CPU per record, {kind}, {LABELS[mode]} vs inline", pairs, unit="records/CPU-s",
                rate=_records_per_cpu_s, target=None, what="records per CPU-second", latencies=False,
                note="the API process and its children (sandbox, V8), over the same turns"))
    for fig in figures:
        fig.tags = ctx.tags
    return figures
