"""Single-record reads and writes and the filtered list, each beside the same operation
done directly with psycopg against the same physical table at the same concurrency."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from bench.context import BenchContext, BenchError, BenchTable
from bench.load import Operation, OperationFailed, http_send
from bench.report import Figure, Target
from bench.scenarios.registry import scenario

GET_TARGET = Target(0.40, "≥ 40 % of psycopg")
# issue #24: the loaded figures of one-record POST and of the filtered list
CREATE_TARGET = Target(0.50, "≥ 50 % of psycopg")
LIST_TARGET = Target(0.70, "≥ 70 % of psycopg")
# the list filter of the peers' benchmark: Score > 500 AND Status = a, page 100, by id
LIST_QUERY = "Score=gt.500&Status=eq.a&limit=100&offset=0&order=id.asc"
PAGE = 100


def _levels(ctx: BenchContext) -> list[tuple[int, str]]:
    return [(1, "sequential"), (ctx.config.concurrency, f"{ctx.config.concurrency} clients")]


async def _render(pool: AsyncConnectionPool, query: sql.Composable) -> str:
    # compose once, outside the timed loop (the API also reuses its composed SQL shape)
    async with pool.connection() as conn:
        return query.as_string(conn)


@scenario("records.get", title="GET one record by id", target=f"16 clients: {GET_TARGET.text}")
async def get_by_id(ctx: BenchContext) -> list[Figure]:
    table = await ctx.seeded_table()
    ids = table.record_ids
    rnd = random.Random(1)
    base = f"{ctx.rest}/tables/{table.id}/records/"
    session, headers = ctx.session, {"Authorization": ctx.headers["Authorization"]}

    async def api_op() -> None:
        async with session.get(base + str(rnd.choice(ids)), headers=headers) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise OperationFailed(f"HTTP {resp.status}: {body[:200]!r}")

    pg_op: Operation | None = None
    pool = await ctx.pool()
    if pool is not None:
        query = await _render(pool, sql.SQL("SELECT * FROM {} WHERE id = %s").format(table.qualified))

        async def pg_op() -> None:
            async with pool.connection() as conn:
                cur = await conn.execute(query, (rnd.choice(ids),))
                if await cur.fetchone() is None:
                    raise OperationFailed("no row")

    figures = []
    for conc, label in _levels(ctx):
        target = GET_TARGET if conc > 1 else None
        figures.append(await ctx.compare("records.get", f"GET by id, {label}", api_op, pg_op, conc, target=target))
    stack, workers = ctx.deployment.stack, ctx.deployment.workers
    if stack is not None and workers:
        # the ceiling: a bare ASGI app on the same uvicorn, client and concurrency
        bare = stack.start_bare(workers)
        try:
            bare_url = f"{bare.base_url}/functions/v1/rest-api/tables/{table.id}/records/{ids[0]}"

            async def bare_op() -> None:
                async with session.get(bare_url) as resp:
                    body = await resp.read()
                    if resp.status != 200:
                        raise OperationFailed(f"HTTP {resp.status}: {body[:200]!r}")

            conc = ctx.config.concurrency
            results = await ctx.interleave([api_op, bare_op], conc)
            figures.append(ctx.figure(
                "records.get", f"GET by id, {conc} clients, vs a bare ASGI app (ceiling)", results[0], results[1],
                note=f"reference: bench/hello.py on the same uvicorn ({workers} workers), fixed answer, "
                     "no routing, middleware, auth or database", baseline_label="bare uvicorn app"))
        finally:
            bare.stop()
    return figures


@scenario("records.create", title="POST one record, run_pipeline=false",
          target=f"16 clients: {CREATE_TARGET.text}")
async def create_one(ctx: BenchContext) -> list[Figure]:
    api_table = await ctx.create_table("create-api")
    pg_table = await ctx.create_table("create-pg")
    rows = ctx.rows[:1000]
    payloads = itertools.cycle([json.dumps({"fields": r}).encode() for r in rows])
    url = f"{ctx.rest}/tables/{api_table.id}/records?run_pipeline=false"
    session, headers = ctx.session, ctx.headers

    async def api_op() -> None:
        await http_send(session, "POST", url, headers, next(payloads), expect=(201,))

    pg_op: Operation | None = None
    pool = await ctx.pool()
    if pool is not None:
        query = await _render(pool, sql.SQL("INSERT INTO {} ({}, {}, {}) VALUES (%s, %s, %s) RETURNING *").format(
            pg_table.qualified, pg_table.col("Name"), pg_table.col("Score"), pg_table.col("Status")))
        values = itertools.cycle([pg_table.encode(r) for r in rows])

        async def pg_op() -> None:
            async with pool.connection() as conn:
                cur = await conn.execute(query, next(values))
                await cur.fetchone()

    return [
        await ctx.compare("records.create", f"POST record, {label}", api_op, pg_op, conc,
                          target=CREATE_TARGET if conc > 1 else None)
        for conc, label in _levels(ctx)
    ]


def _list_sql(table: BenchTable) -> tuple[sql.Composed, sql.Composed]:
    where = sql.SQL("{} > %s AND {} = %s").format(table.col("Score"), table.col("Status"))
    page = sql.SQL(
        "SELECT id, created_at, updated_at, {}, {}, {} FROM {} WHERE {} ORDER BY id LIMIT %s OFFSET %s"
    ).format(table.col("Name"), table.col("Score"), table.col("Status"), table.qualified, where)
    count = sql.SQL("SELECT count(*) FROM {} WHERE {}").format(table.qualified, where)
    return page, count


async def _check_list(ctx: BenchContext, table: BenchTable, url: str) -> None:
    """The API page and the baseline page must be the same rows, or the comparison is void."""
    expected = sum(1 for r in ctx.rows if r["Score"] > 500 and r["Status"] == "a")
    async with ctx.session.get(url, headers={**ctx.headers, "Prefer": "count=exact"}) as resp:
        body: dict[str, Any] = await resp.json()
        total = resp.headers.get("X-Total-Count")
    if resp.status != 200:
        raise BenchError(f"filtered list failed: {resp.status} {str(body)[:300]}")
    api_ids = [r["id"] for r in body["records"]]
    if len(api_ids) != min(PAGE, expected) or total != str(expected):
        raise BenchError(f"filtered list: {len(api_ids)} rows, total {total}; expected {expected}")
    pool = await ctx.pool()
    if pool is not None:
        page, _ = _list_sql(table)
        async with pool.connection() as conn:
            cur = await conn.execute(page, (500.0, table.options["a"], PAGE, 0))
            pg_ids = [r[0] for r in await cur.fetchall()]
        if pg_ids != api_ids:
            raise BenchError("the baseline query does not return the API's page")


async def _list(ctx: BenchContext, *, count: bool) -> list[Figure]:
    table = await ctx.seeded_table()
    url = f"{ctx.rest}/tables/{table.id}/records?{LIST_QUERY}"
    await _check_list(ctx, table, url)
    headers = {"Authorization": ctx.headers["Authorization"]}
    if count:
        headers["Prefer"] = "count=exact"
    session = ctx.session

    async def api_op() -> None:
        async with session.get(url, headers=headers) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise OperationFailed(f"HTTP {resp.status}: {body[:200]!r}")

    pg_op: Operation | None = None
    pool = await ctx.pool()
    if pool is not None:
        page_sql, count_sql = _list_sql(table)
        page_q, count_q = await _render(pool, page_sql), await _render(pool, count_sql)
        params = (500.0, table.options["a"])

        async def pg_op() -> None:
            async with pool.connection() as conn:
                if count:
                    # page and count in one round trip, as a careful hand-written client would
                    async with conn.pipeline():
                        page_cur = await conn.execute(page_q, (*params, PAGE, 0))
                        count_cur = await conn.execute(count_q, params)
                    await page_cur.fetchall()
                    await count_cur.fetchone()
                else:
                    cur = await conn.execute(page_q, (*params, PAGE, 0))
                    await cur.fetchall()

    name = "records.list_count" if count else "records.list"
    what = "filtered list + count=exact" if count else "filtered list"
    return [
        await ctx.compare(name, f"{what}, {label}", api_op, pg_op, conc,
                          target=LIST_TARGET if conc > 1 and not count else None)
        for conc, label in _levels(ctx)
    ]


@scenario("records.list", title="filtered list (Score>500 AND Status=a), page 100, by id",
          target=f"16 clients: {LIST_TARGET.text}")
async def filtered_list(ctx: BenchContext) -> list[Figure]:
    return await _list(ctx, count=False)


@scenario("records.list_count", title="filtered list with Prefer: count=exact")
async def filtered_list_count(ctx: BenchContext) -> list[Figure]:
    return await _list(ctx, count=True)
