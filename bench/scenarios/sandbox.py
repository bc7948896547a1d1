"""Formulas off the event loop (issue #22): the cost of evaluating formulas in the
sandbox processes (:mod:`activities.sandbox`) instead of on the API's event loop, on the
``pipelines`` scenarios' 3-chained-formula table, in the same run.

Three fresh single-worker API processes, each on its own task queue, differing only in
``WDS_FORMULA_INLINE``: ``cheap`` (the default: cheap formulas inline under the 20 ms
slice, the rest in the sandbox), ``never`` (every formula in the sandbox: one round trip per
formula column and batch) and ``always`` (every formula inline on the event loop, unsliced,
as before the budgets: the baseline). The ``never`` figures are why cheap formulas stay
inline.

* single create with the pipeline, sequential, p50 beside the inline process's
  (interleaved) — target: overhead ≤ 10 %;
* batches of 500 rows with the pipeline, rows/s beside the inline process's (alternating
  call by call) — target ≥ 90 %.
"""

from __future__ import annotations

import itertools
import json
import math
import secrets
from typing import Any

from bench.context import BenchContext, NotMeasurable, latency_figure, not_measured
from bench.load import Operation, OperationFailed, http_send, run_alternating_batches, run_phase
from bench.report import Figure, Target
from bench.scenarios.pipelines import BATCH, _check_record, formula_table
from bench.scenarios.registry import scenario

MAX_OVERHEAD = 1.1
CREATE_TARGET = Target(1 / MAX_OVERHEAD, f"p50 ≤ {MAX_OVERHEAD:g}× inline")
BATCH_TARGET = Target(1 / MAX_OVERHEAD, "≥ 90 % of inline rows/s")
WARMUP_S = 2.0


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


@scenario("pipelines.sandbox", title="3 chained formulas: the default (cheap inline) and all-sandbox vs inline as before",
          target=f"overhead ≤ {(MAX_OVERHEAD - 1) * 100:.0f} % (create p50, batch rows/s)")
async def sandbox_overhead(ctx: BenchContext) -> list[Figure]:
    modes = {"cheap": "default (cheap formulas inline, sliced)", "never": "every formula in the sandbox"}
    names = {m: (f"POST record with 3 chained formulas, sequential, {label} vs inline as before",
                 f"batch insert, {BATCH}/call, 3 formulas, {label} vs inline as before") for m, label in modes.items()}
    queue = secrets.token_hex(3)
    try:
        async with ctx.extra_api("formula-cheap", workers=1, WDS_FORMULA_INLINE="cheap",
                                 WDS_TASK_QUEUE=f"bench-cheap-{queue}") as cheap, \
                ctx.extra_api("formula-sandbox", workers=1, WDS_FORMULA_INLINE="never",
                              WDS_TASK_QUEUE=f"bench-sandbox-{queue}") as boxed, \
                ctx.extra_api("formula-inline", workers=1, WDS_FORMULA_INLINE="always",
                              WDS_TASK_QUEUE=f"bench-inline-{queue}") as inline:
            rests = [f"{p.base_url}/functions/v1/rest-api" for p in (cheap, boxed, inline)]
            create_table, batch_table = await formula_table(ctx, "sandbox1"), await formula_table(ctx, "sandbox500")
            creates = [_create_op(ctx, rest, create_table) for rest in rests]
            for op in creates:  # fresh processes: sandbox children, caches, pools
                await run_phase(op, concurrency=1, duration_s=WARMUP_S, max_ops=ctx.config.max_ops)
            cheap_create, boxed_create, inline_create = await ctx.interleave(creates, 1)
            cheap_batch, boxed_batch, inline_batch = await run_alternating_batches(
                [_batch_ops(ctx, rest, batch_table, ctx.rows) for rest in rests])
    except NotMeasurable as exc:
        return [not_measured("pipelines.sandbox", name, str(exc), target=CREATE_TARGET)
                for pair in names.values() for name in pair]
    rows_per_call = len(ctx.rows) / math.ceil(len(ctx.rows) / BATCH)
    figures = []
    for mode, create, batch in (("cheap", cheap_create, cheap_batch), ("never", boxed_create, boxed_batch)):
        figures.append(latency_figure(
            "pipelines.sandbox", names[mode][0], create, inline_create, max_ratio=MAX_OVERHEAD,
            baseline_label="inline", tags=ctx.tags,
            note=f"fresh API processes: WDS_FORMULA_INLINE={mode} vs always, interleaved"))
        fig = ctx.figure("pipelines.sandbox", names[mode][1], batch, inline_batch, unit="rows/s",
                         scale=rows_per_call, target=BATCH_TARGET,
                         note=f"WDS_FORMULA_INLINE={mode} vs always, the same batches alternating call by call")
        fig.baseline_label = "inline"
        figures.append(fig)
    return figures
