"""SQL and schema (issue 6).

* ``sql.select``: ``POST {rest}/sql`` with a filtered ``SELECT … WHERE Score > 500 AND
  Status = 'a' ORDER BY id LIMIT 100`` on the read table, beside the same query on the
  physical table through psycopg, interleaved, sequential (p50, target ≤ 2× psycopg) and
  at 16 clients (req/s, informational). The endpoint also pays for its safety: a READ
  ONLY transaction as the workspace's read-only role with the plan's statement timeout,
  and one row read past the page (``has_more``). A reference figure puts it beside
  psycopg doing exactly that work in one round trip; another measures the answer with
  ``count: true`` (the exact ``total`` reads every match) beside psycopg doing the
  transaction, the count and the page.
* ``sql.schema``: ``GET {rest}/schema`` on a workspace of 50 tables (5 columns each),
  p50 ≤ 20 ms (absolute), with the two metadata queries it is built from (tables, then
  columns of the workspace) through psycopg beside it for reference.
"""

from __future__ import annotations

import json

from psycopg import sql

from bench.context import BenchContext, BenchError, NotMeasurable, budget_figure, latency_figure, not_measured
from bench.load import Operation, OperationFailed, http_send
from bench.report import Figure
from bench.scenarios.registry import scenario

SQL_MAX_RATIO = 2.0
SCHEMA_TABLES = 50
SCHEMA_BUDGET_MS = 20.0
PAGE = 100
SCHEMA_COLUMNS = [
    {"name": "Name", "type": "text"},
    {"name": "Score", "type": "number"},
    {"name": "When", "type": "date"},
    {"name": "Done", "type": "checkbox"},
    {"name": "Status", "type": "single_select", "options": [{"label": c, "color": "blue"} for c in "abcd"]},
]


@scenario("sql.select", title="SQL endpoint: filtered SELECT, LIMIT 100, vs the same query through psycopg",
          target=f"sequential p50 ≤ {SQL_MAX_RATIO:g}× psycopg")
async def sql_select(ctx: BenchContext) -> list[Figure]:
    table = await ctx.seeded_table()
    info = await ctx.call("GET", f"{ctx.rest}/tables/{table.id}", expect=(200,))
    query = (f'SELECT * FROM "{info["name"]}" WHERE Score > 500 AND Status = \'a\' '
             f"ORDER BY id LIMIT {PAGE}")
    url = f"{ctx.rest}/sql"
    payload = json.dumps({"query": query}).encode()
    counted_payload = json.dumps({"query": query, "count": True}).encode()
    session, headers = ctx.session, ctx.headers
    got = json.loads(await http_send(session, "POST", url, headers, payload, expect=(200,)))
    api_ids = [r["id"] for r in got["rows"]]
    counted = json.loads(await http_send(session, "POST", url, headers, counted_payload, expect=(200,)))
    if counted["total"] < len(api_ids) or got["has_more"] != (counted["total"] > PAGE):
        raise BenchError(f"the endpoint's answers disagree: {counted['total']} match, {len(api_ids)} rows")

    async def api_op() -> None:
        await http_send(session, "POST", url, headers, payload, expect=(200,))

    async def api_counted_op() -> None:
        await http_send(session, "POST", url, headers, counted_payload, expect=(200,))

    pg_op: Operation | None = None
    pool = await ctx.pool()
    if pool is not None:
        stmt = sql.SQL(
            "SELECT id, created_at, updated_at, {}, {}, {} FROM {} WHERE {} > %s AND {} = %s ORDER BY id LIMIT %s"
        ).format(table.col("Name"), table.col("Score"), table.col("Status"), table.qualified,
                 table.col("Score"), table.col("Status"))
        params = (500.0, table.options["a"], PAGE)
        async with pool.connection() as conn:
            text = stmt.as_string(conn)
            pg_ids = [r[0] for r in await (await conn.execute(text, params)).fetchall()]
        if pg_ids != api_ids:
            raise BenchError("the psycopg query does not return the SQL endpoint's rows")

        async def pg_op() -> None:
            async with pool.connection() as conn:
                cur = await conn.execute(text, params)
                if len(await cur.fetchall()) != len(api_ids):
                    raise OperationFailed("row count changed")

        # Like for like: what the endpoint has PostgreSQL do for its answer: a read-only
        # transaction as the workspace's read-only role with the plan's timeout, and the page
        # with one row more (has_more), or the exact count and the page; in one round trip.
        role = f"wds_ro_{table.schema.removeprefix('ws_')}"
        count_text = sql.SQL("SELECT count(*) FROM {} WHERE {} > %s AND {} = %s").format(
            table.qualified, table.col("Score"), table.col("Status"))

        def pg_same(counting: bool) -> Operation:
            async def op() -> None:
                async with pool.connection() as conn:
                    async with conn.pipeline():
                        await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                        await conn.execute("SELECT set_config('role', %s, true),"
                                           " set_config('search_path', 'pg_catalog', true),"
                                           " set_config('statement_timeout', '30000', true)", (role,))
                        count_cur = await conn.execute(count_text, params[:2]) if counting else None
                        page_cur = await conn.execute(text, params if counting else (*params[:2], PAGE + 1))
                        await conn.execute("ROLLBACK")
                    if count_cur is not None:
                        await count_cur.fetchone()
                    if len(await page_cur.fetchall()) < len(api_ids):
                        raise OperationFailed("row count changed")
            return op

    ops: list[Operation] = [api_op] if pg_op is None else [api_op, pg_op, pg_same(False), api_counted_op,
                                                           pg_same(True)]
    seq = await ctx.interleave(ops, 1)
    figures = [latency_figure("sql.select", f"SQL SELECT … LIMIT {PAGE}, sequential", seq[0],
                              seq[1] if len(seq) > 1 else None, max_ratio=SQL_MAX_RATIO, tags=ctx.tags,
                              note=f"{len(api_ids)} rows per call of {counted['total']:,} matching; has_more, no count"
                                   " (as REST lists)")]
    if len(seq) > 1:
        figures.append(latency_figure(
            "sql.select", f"SQL SELECT … LIMIT {PAGE}, sequential, vs psycopg doing the endpoint's work", seq[0],
            seq[2], baseline_label="psycopg: read-only txn + page of 101", tags=ctx.tags,
            note="reference: the transaction, role and timeout, and one row past the page for has_more"))
        figures.append(latency_figure(
            "sql.select", f"SQL SELECT … LIMIT {PAGE} with count: true, sequential, vs psycopg doing its work",
            seq[3], seq[4], baseline_label="psycopg: read-only txn + count + page", tags=ctx.tags,
            note=f"reference: the exact total ({counted['total']:,} rows) reads every match"))
    conc = ctx.config.concurrency
    figures.append(await ctx.compare("sql.select", f"SQL SELECT … LIMIT {PAGE}, {conc} clients", api_op, pg_op, conc))
    return figures


async def _schema_workspace(ctx: BenchContext) -> tuple[int, str]:
    ws_id, (token,) = await ctx.new_workspace("bench-schema")
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    for i in range(SCHEMA_TABLES):
        await ctx.call("POST", f"{ctx.rest}/tables", {"name": f"t{i:02d}", "icon": "table", "columns": SCHEMA_COLUMNS},
                       expect=(201,), headers=headers)
    return ws_id, token


@scenario("sql.schema", title=f"GET /schema on a {SCHEMA_TABLES}-table workspace",
          target=f"p50 ≤ {SCHEMA_BUDGET_MS:g} ms")
async def schema_call(ctx: BenchContext) -> list[Figure]:
    name = f"GET /schema, {SCHEMA_TABLES} tables × {len(SCHEMA_COLUMNS)} columns, sequential"
    try:
        ws_id, token = await _schema_workspace(ctx)
    except NotMeasurable as exc:
        return [not_measured("sql.schema", name, str(exc))]
    url = f"{ctx.rest}/schema"
    session, headers = ctx.session, {"Authorization": f"Bearer {token}"}
    body = await ctx.call("GET", url, expect=(200,), headers=headers)
    if len(body["tables"]) != SCHEMA_TABLES:
        raise BenchError(f"/schema lists {len(body['tables'])} tables, expected {SCHEMA_TABLES}")

    async def api_op() -> None:
        async with session.get(url, headers=headers) as resp:
            raw = await resp.read()
            if resp.status != 200:
                raise OperationFailed(f"HTTP {resp.status}: {raw[:200]!r}")

    pg_op: Operation | None = None
    pool = await ctx.pool()
    if pool is not None:
        async def pg_op() -> None:
            async with pool.connection() as conn:
                tables = await conn.execute("SELECT * FROM wds.tables WHERE workspace_id = %s ORDER BY id", (ws_id,))
                await tables.fetchall()
                cols = await conn.execute(
                    "SELECT * FROM wds.columns WHERE workspace_id = %s ORDER BY table_id, position, id", (ws_id,))
                await cols.fetchall()

    ops: list[Operation] = [api_op] if pg_op is None else [api_op, pg_op]
    results = await ctx.interleave(ops, 1)
    api = results[0]
    base = results[1] if len(results) > 1 else None
    return [
        budget_figure("sql.schema", name, api.p50_ms, SCHEMA_BUDGET_MS, p50_ms=api.p50_ms, p99_ms=api.p99_ms,
                      errors=api.errors, tags=ctx.tags, note=f"{len(json.dumps(body)) // 1024} KiB per answer"),
        latency_figure("sql.schema", f"{name}, vs its 2 metadata queries", api, base, tags=ctx.tags,
                       note="reference only: the API reads tables and columns from its schema cache and runs one agents query"),
    ]
