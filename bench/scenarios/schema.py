"""Schema changes (issue 21).

* ``schema.rename``: renaming a column that 50 formula columns and 20 views use (every
  one of them reads back with the new name) — target p50 < 100 ms — beside renaming a
  column nothing uses, on the same table in the same run. References are stored by id,
  so the rename is one metadata row whatever uses the column.

* ``schema.retype``: ``PATCH …/columns/{id}`` changing a text column of ``WDS_BENCH_RETYPE_ROWS``
  rows (default 1,000,000; 20,000 with ``--quick``) to number. The values are number texts
  (``"12"``, ``" 45.5 "``, ``"-7"``, ``"1250.125"``), all convertible. The API counts the
  losses with one scan and converts with ``ALTER … TYPE … USING`` (storage/convert.py);
  beside it psycopg runs the plain ``ALTER … TYPE double precision USING c::double precision``
  on an identical table (same index work), the floor of any in-place conversion.
  Meanwhile clients GET records by id from another table; their p99 is put beside the
  idle p99 measured just before (the ratio shows what the conversion costs other tables).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import time

from psycopg import sql

from bench.context import (
    BenchContext,
    BenchError,
    BenchTable,
    NotMeasurable,
    budget_figure,
    inverse_ms,
    latency_figure,
    not_measured,
)
from bench.load import FAILURES, Operation, OperationFailed, PhaseResult, http_send
from bench.report import Figure
from bench.scenarios.registry import scenario

RETYPE_ROWS = int(os.environ.get("WDS_BENCH_RETYPE_ROWS", "1000000"))
QUICK_ROWS = 20_000
GET_CONCURRENCY = 4


async def _fill(ctx: BenchContext, table: BenchTable, rows: int) -> None:
    """``rows`` number texts in the table's Name column, straight into PostgreSQL (change
    capture off for the load: a million realtime events are not what is measured)."""
    pool = await ctx.pool()
    assert pool is not None
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(sql.SQL("ALTER TABLE {} DISABLE TRIGGER USER").format(table.qualified))
        await conn.execute(
            sql.SQL(
                "INSERT INTO {} ({}) SELECT CASE i %% 4 WHEN 0 THEN (i %% 1000)::text"
                " WHEN 1 THEN ' ' || (i %% 997)::text || '.5 ' WHEN 2 THEN '-' || (i %% 991)::text"
                " ELSE ((i %% 10007) / 8.0)::text END FROM generate_series(1, %s) AS i"
            ).format(table.qualified, table.col("Name")),
            (rows,),
        )
        await conn.execute(sql.SQL("ALTER TABLE {} ENABLE TRIGGER USER").format(table.qualified))
    async with pool.connection() as conn:
        await conn.execute(sql.SQL("VACUUM ANALYZE {}").format(table.qualified))


async def _load_until(done: asyncio.Future[object], op: Operation, concurrency: int) -> PhaseResult:
    """Run ``op`` from ``concurrency`` workers until ``done`` completes."""
    latencies: list[float] = []
    errors: list[str] = []
    clock = time.perf_counter

    async def worker() -> None:
        while not done.done():
            t0 = clock()
            try:
                await op()
            except FAILURES as exc:
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            latencies.append(clock() - t0)

    t0 = clock()
    cpu0 = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return PhaseResult(concurrency=concurrency, ops=len(latencies), errors=len(errors), elapsed_s=clock() - t0,
                       latencies=latencies, client_cpu_s=time.process_time() - cpu0,
                       first_error=errors[0] if errors else None)


@scenario("schema.retype", title="text → number conversion of a large column; GET p99 on another table meanwhile")
async def retype(ctx: BenchContext) -> list[Figure]:
    pool = await ctx.pool()
    rows = QUICK_ROWS if ctx.config.quick else RETYPE_ROWS
    name = f"text → number, {rows:,} rows"
    if pool is None:
        return [not_measured("schema.retype", name, "needs --dsn to fill the table")]
    api_table = await ctx.create_table("retype-api")
    pg_table = await ctx.create_table("retype-pg")
    for t in (api_table, pg_table):
        await _fill(ctx, t, rows)
    read = await ctx.seeded_table()
    rnd = random.Random(7)
    get_base = f"{ctx.rest}/tables/{read.id}/records/"
    session, auth = ctx.session, {"Authorization": ctx.headers["Authorization"]}

    async def get_op() -> None:
        async with session.get(get_base + str(rnd.choice(read.record_ids)), headers=auth) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise OperationFailed(f"HTTP {resp.status}: {body[:200]!r}")

    await ctx.settle()
    idle = await ctx.phase(get_op, GET_CONCURRENCY)

    column = api_table.physical["Name"].removeprefix("c_")
    url = f"{ctx.rest}/tables/{api_table.id}/columns/{column}"

    async def convert() -> tuple[float, object]:
        t0 = time.perf_counter()
        out = await ctx.call("PATCH", url, {"type": "number"})
        return time.perf_counter() - t0, out

    task = asyncio.ensure_future(convert())
    during = await _load_until(task, get_op, GET_CONCURRENCY)
    api_s, out = await task
    report = out.get("conversion") if isinstance(out, dict) else None
    if report != {"converted": rows, "lost": 0}:
        raise BenchError(f"the conversion reported {report!r}, expected {rows} converted and none lost")

    await ctx.settle()
    index = sql.Identifier(f"t_{pg_table.id}_{pg_table.physical['Name']}")
    t0 = time.perf_counter()
    trigram = sql.Identifier(f"t_{pg_table.id}_{pg_table.physical['Name']}_trgm")
    async with pool.connection() as conn, conn.transaction():
        # the same index work as the service: its text indexes go, the number's (value, id) btree comes
        for dropped in (index, trigram):
            await conn.execute(sql.SQL("DROP INDEX IF EXISTS {}.{}").format(sql.Identifier(pg_table.schema), dropped))
        await conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE double precision USING {}::double precision")
                           .format(pg_table.qualified, pg_table.col("Name"), pg_table.col("Name")))
        await conn.execute(sql.SQL("CREATE INDEX {} ON {} ({}, id)").format(
            index, pg_table.qualified, pg_table.col("Name")))
    pg_s = time.perf_counter() - t0

    p99_ratio = (during.p99_ms / idle.p99_ms) if during.p99_ms and idle.p99_ms else None
    return [
        Figure(scenario="schema.retype", name=name, unit="rows/s", value=rows / api_s, baseline=rows / pg_s,
               baseline_label="psycopg plain ALTER … USING c::float8",
               note=f"API {api_s:.2f} s (loss count scan + ALTER with the parsing rules), plain cast {pg_s:.2f} s",
               tags=ctx.tags),
        Figure(scenario="schema.retype", name=f"GET by id on another table during it, {GET_CONCURRENCY} clients",
               unit="/s (1÷p99)", value=inverse_ms(during.p99_ms), baseline=inverse_ms(idle.p99_ms),
               baseline_label="idle", p50_ms=during.p50_ms, p99_ms=during.p99_ms, baseline_p50_ms=idle.p50_ms,
               baseline_p99_ms=idle.p99_ms, errors=during.errors, client_cpu=during.client_cpu,
               note=(f"p99 {p99_ratio:.2f}× idle; " if p99_ratio else "") + f"{during.ops} GETs during the change"
               + (f"; first error: {during.first_error}" if during.first_error else ""),
               tags=ctx.tags),
    ]


FORMULAS = 50
VIEWS = 20
RENAME_BUDGET_MS = 100.0


@scenario("schema.rename", title=f"rename a column used by {FORMULAS} formulas and {VIEWS} views",
          target=f"p50 < {RENAME_BUDGET_MS:g} ms")
async def rename_used_column(ctx: BenchContext) -> list[Figure]:
    name = f"PATCH column name, used by {FORMULAS} formulas and {VIEWS} views, sequential"
    try:
        _, (token,) = await ctx.new_workspace("bench-rename")
    except NotMeasurable as exc:
        return [not_measured("schema.rename", name, str(exc))]
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    columns = [{"name": "Used", "type": "number"}, {"name": "Spare", "type": "number"}]
    columns += [{"name": f"F{i:02d}", "type": "formula", "formula": f"{{Used}} * {i} + 1"} for i in range(FORMULAS)]
    table = await ctx.call("POST", f"{ctx.rest}/tables", {"name": "Renames", "icon": "table", "columns": columns},
                           expect=(201,), headers=headers)
    tid = table["id"]
    used, spare = table["columns"][0]["id"], table["columns"][1]["id"]
    for i in range(VIEWS):
        await ctx.call("POST", f"{ctx.rest}/tables/{tid}/views", {
            "name": f"v{i}", "view_type": "grid",
            "config": {"filters": {"Used": f"gte.{i}"}, "sort": "Used.desc", "column_order": ["Used", "F00"]}},
            expect=(201,), headers=headers)
    counter = itertools.count()

    def renamer(column_id: int, prefix: str):  # noqa: ANN202 - an Operation
        async def op() -> None:
            body = f'{{"name": "{prefix}{next(counter)}"}}'.encode()
            await http_send(ctx.session, "PATCH", f"{ctx.rest}/tables/{tid}/columns/{column_id}", headers, body,
                            expect=(200,))
        return op

    api, base = await ctx.interleave([renamer(used, "Used "), renamer(spare, "Spare ")], 1)
    # the renames carried: every formula and view reads the last name
    cols = await ctx.call("GET", f"{ctx.rest}/tables/{tid}/columns", expect=(200,), headers=headers)
    current = next(c["name"] for c in cols if c["id"] == used)
    stale = [c["name"] for c in cols if c["type"] == "formula" and not c["formula"].startswith(f"{{{current}}}")]
    views = await ctx.call("GET", f"{ctx.rest}/tables/{tid}/views", expect=(200,), headers=headers)
    stale += [v["name"] for v in views if list(v["config"]["filters"]) != [current]]
    if stale:
        raise OperationFailed(f"renames did not carry into {stale[:5]}")
    return [
        budget_figure("schema.rename", name, api.p50_ms, RENAME_BUDGET_MS, p50_ms=api.p50_ms, p99_ms=api.p99_ms,
                      errors=api.errors, tags=ctx.tags),
        latency_figure("schema.rename", f"{name}, vs renaming an unused column of the same table", api, base,
                       baseline_label="unused column", tags=ctx.tags,
                       note="references by id: the dependents do not change when a name does"),
    ]
