"""Bulk insert: all bench rows in sequential batch calls of 100 and of 500 rows (rows/s),
beside psycopg inserting the same rows as one multi-row ``INSERT ... RETURNING *`` per
batch into an identical fresh table."""

from __future__ import annotations

from typing import Any

from psycopg import sql

from bench.context import BenchContext, BenchTable, batch_payload
from bench.load import Operation, OperationFailed, http_send, run_alternating_batches
from bench.report import Figure
from bench.scenarios.registry import scenario

BATCH_SIZES = (100, 500)


def _chunks(rows: list[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    return [rows[i:i + size] for i in range(0, len(rows), size)]


def _api_ops(ctx: BenchContext, table: BenchTable, size: int) -> list[Operation]:
    url = f"{ctx.rest}/tables/{table.id}/records/batch"
    session, headers = ctx.session, ctx.headers
    ops: list[Operation] = []
    for chunk in _chunks(ctx.rows, size):
        payload = batch_payload(chunk)  # encoded before the clock starts

        async def op(payload: bytes = payload) -> None:
            body = await http_send(session, "POST", url, headers, payload, expect=(200, 201))
            # a row-level failure is reported inside a 200; a bench must not count it
            if b'"error"' in body:
                raise OperationFailed(f"a row was rejected: {body[:300]!r}")

        ops.append(op)
    return ops


async def _pg_ops(ctx: BenchContext, table: BenchTable, size: int) -> list[Operation]:
    pool = await ctx.pool()
    assert pool is not None
    cols = sql.SQL("{}, {}, {}").format(table.col("Name"), table.col("Score"), table.col("Status"))
    ops: list[Operation] = []
    rendered: dict[int, str] = {}
    async with pool.connection() as conn:
        for n in {len(c) for c in _chunks(ctx.rows, size)}:
            values = sql.SQL(", ").join([sql.SQL("(%s, %s, %s)")] * n)
            rendered[n] = sql.SQL("INSERT INTO {} ({}) VALUES {} RETURNING *").format(
                table.qualified, cols, values).as_string(conn)
    for chunk in _chunks(ctx.rows, size):
        params = [v for row in chunk for v in table.encode(row)]
        query = rendered[len(chunk)]

        async def op(query: str = query, params: list[Any] = params) -> None:
            async with pool.connection() as conn:
                cur = await conn.execute(query, params)
                await cur.fetchall()

        ops.append(op)
    return ops


@scenario("records.batch", title="batch insert of all rows, sequential calls")
async def batch_insert(ctx: BenchContext) -> list[Figure]:
    figures = []
    for size in BATCH_SIZES:
        api_table = await ctx.create_table(f"batch{size}-api")
        sequences = [_api_ops(ctx, api_table, size)]
        if ctx.deployment.dsn is not None:
            pg_table = await ctx.create_table(f"batch{size}-pg")
            sequences.append(await _pg_ops(ctx, pg_table, size))
        # call by call, API and baseline alternate so foreign load hits both alike
        results = await run_alternating_batches(sequences)
        api, base = results[0], (results[1] if len(results) > 1 else None)
        # rate is calls/s; the mean rows per call turns it into rows/s (the last call may be short)
        rows_per_call = len(ctx.rows) / len(_chunks(ctx.rows, size))
        figures.append(ctx.figure(
            "records.batch", f"batch insert {len(ctx.rows):,} rows, {size}/call", api, base,
            unit="rows/s", scale=rows_per_call,
        ))
    return figures
