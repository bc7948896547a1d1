"""SQL analytics (issue #25), opt-in: ``--analytics-rows N`` (the issue's figure: 1,000,000).

Two tables made through the API, Companies (1,000 records, a Country select) and Deals
(N records: Amount, a Stage select, Closed, and a Company relation to Companies), filled
straight in PostgreSQL with one ``INSERT … SELECT generate_series`` each (the bulk load
is test setup, not measured; change capture and the relation's foreign-key check are
skipped for it with ``session_replication_role = replica``). Then, each beside the same
question asked directly of the physical tables through psycopg as the superuser,
interleaved, sequential:

* ``GROUP BY`` over every deal: count, sum and mean of the amount per stage;
* a join along the relation, aggregated: count and sum per company country;
* a join along the relation returning a page (informational: the per-request overhead,
  not PostgreSQL's work, dominates it).

Target: the endpoint's p50 ≤ 1.25× psycopg's, i.e. ≥ 80 % of its throughput. The endpoint
pays for its safety on top (read-only transaction as the workspace's read-only role with
the plan's timeout, labels instead of option ids, rows rendered as JSON objects).
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from psycopg import sql

from bench.context import BenchContext, BenchError, latency_figure, not_measured
from bench.load import OperationFailed, http_send
from bench.report import Figure
from bench.scenarios.registry import scenario

MAX_RATIO = 1.25  # p50 ≤ 1.25× psycopg: ≥ 80 % of its throughput
COMPANIES = 1_000
STAGES = ("Lead", "Open", "Won", "Lost")
COUNTRIES = ("France", "Germany", "Japan", "Spain", "Italy")
BASELINE = "psycopg (superuser)"


async def _table(ctx: BenchContext, name: str, columns: list[dict[str, Any]]) -> dict[str, Any]:
    return await ctx.call("POST", f"{ctx.rest}/tables", {"name": name, "icon": "table", "columns": columns},
                          expect=(200, 201))


def _col(table: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in table["columns"] if c["name"] == name)


@scenario("sql.analytics", title="SQL analytics: GROUP BY over N rows and a join along a relation, vs psycopg",
          target=f"sequential p50 ≤ {MAX_RATIO:g}× psycopg (≥ 80 % of its throughput); opt-in: --analytics-rows")
async def sql_analytics(ctx: BenchContext) -> list[Figure]:
    rows = ctx.config.analytics_rows
    names = names_of(rows or 1_000_000)
    if rows <= 0:
        return [not_measured("sql.analytics", n, "opt-in: run with --analytics-rows 1000000") for n in names]
    pool = await ctx.pool()
    if pool is None:
        return [not_measured("sql.analytics", n, "needs the database DSN for the bulk load and the baseline")
                for n in names]
    tag = secrets.token_hex(3)
    companies = await _table(ctx, f"bench-companies-{tag}", [
        {"name": "Name", "type": "text"},
        {"name": "Country", "type": "single_select", "options": [{"label": c, "color": "blue"} for c in COUNTRIES]},
    ])
    deals = await _table(ctx, f"bench-deals-{tag}", [
        {"name": "Amount", "type": "number"},
        {"name": "Stage", "type": "single_select", "options": [{"label": s, "color": "blue"} for s in STAGES]},
        {"name": "Closed", "type": "date"},
    ])
    rel = await ctx.call("POST", f"{ctx.rest}/tables/{deals['id']}/columns",
                         {"name": "Company", "type": "relation", "relation_table_id": companies["id"]},
                         expect=(200, 201))
    try:
        return await _measure(ctx, pool, companies, deals, rel, rows)
    finally:
        for t in (deals, companies):
            await ctx.call("DELETE", f"{ctx.rest}/tables/{t['id']}", expect=(200, 204))


async def _measure(ctx: BenchContext, pool: Any, companies: dict[str, Any], deals: dict[str, Any],
                   rel: dict[str, Any], rows: int) -> list[Figure]:
    schema = await ctx._schema_of(int(deals["id"]))
    c_tab = sql.Identifier(schema, f"t_{companies['id']}")
    d_tab = sql.Identifier(schema, f"t_{deals['id']}")
    c_name, c_country = (sql.Identifier(f"c_{_col(companies, n)['id']}") for n in ("Name", "Country"))
    d_amount, d_stage, d_closed = (sql.Identifier(f"c_{_col(deals, n)['id']}") for n in ("Amount", "Stage", "Closed"))
    d_company = sql.Identifier(f"c_{rel['id']}")
    country_ids = [o["id"] for o in _col(companies, "Country")["options"]]
    stage_ids = [o["id"] for o in _col(deals, "Stage")["options"]]
    stage_label = {o["id"]: o["label"] for o in _col(deals, "Stage")["options"]}
    country_label = {o["id"]: o["label"] for o in _col(companies, "Country")["options"]}

    started = time.monotonic()
    async with pool.connection() as conn:
        async with conn.transaction():
            await conn.execute("SET LOCAL session_replication_role = replica")  # bulk load: no triggers
            await conn.execute(sql.SQL(
                "INSERT INTO {t} (id, {name}, {country}) SELECT i, 'Company ' || i, (%s::text[])[1 + i %% {k}]"
                " FROM generate_series(1, {n}) i").format(
                t=c_tab, name=c_name, country=c_country, k=sql.Literal(len(country_ids)),
                n=sql.Literal(COMPANIES)), (country_ids,))
            await conn.execute(sql.SQL(
                "INSERT INTO {t} ({amount}, {stage}, {closed}, {company})"
                " SELECT ((i * 7919) %% 100000) / 100.0, (%s::text[])[1 + (i * 7) %% {k}],"
                " timestamptz '2024-01-01' + ((i * 13) %% 730) * interval '1 day', 1 + (i * 31) %% {c}"
                " FROM generate_series(1::bigint, {n}) i").format(
                t=d_tab, amount=d_amount, stage=d_stage, closed=d_closed, company=d_company,
                k=sql.Literal(len(stage_ids)), c=sql.Literal(COMPANIES), n=sql.Literal(rows)), (stage_ids,))
        for t in (c_tab, d_tab):
            await conn.execute(sql.SQL("VACUUM ANALYZE {}").format(t))
    load_s = time.monotonic() - started

    dq, cq = json.dumps(deals["name"]), json.dumps(companies["name"])  # double-quoted names
    group_q = (f'SELECT "Stage", COUNT(*) AS n, SUM("Amount") AS revenue, AVG("Amount") AS avg_amount'
               f' FROM {dq} GROUP BY "Stage" ORDER BY "Stage"')
    join_q = (f'SELECT c."Country", COUNT(*) AS n, SUM(d."Amount") AS revenue FROM {dq} d'
              f' JOIN {cq} c ON d."Company" = c.id GROUP BY c."Country" ORDER BY c."Country"')
    page_q = (f'SELECT d.id, d."Amount", c."Name" FROM {dq} d JOIN {cq} c ON d."Company" = c.id'
              f' WHERE d."Amount" > 990 ORDER BY d.id LIMIT 100')
    group_pg = sql.SQL("SELECT {s}, count(*), sum({a}), avg({a}) FROM {t} GROUP BY {s} ORDER BY {s}").format(
        s=d_stage, a=d_amount, t=d_tab)
    join_pg = sql.SQL(
        "SELECT c.{country}, count(*), sum(d.{a}) FROM {d} d JOIN {c} c ON d.{rel} = c.id"
        " GROUP BY c.{country} ORDER BY c.{country}").format(
        country=c_country, a=d_amount, d=d_tab, c=c_tab, rel=d_company)
    page_pg = sql.SQL(
        "SELECT d.id, d.{a}, c.{name} FROM {d} d JOIN {c} c ON d.{rel} = c.id WHERE d.{a} > 990"
        " ORDER BY d.id LIMIT 100").format(a=d_amount, name=c_name, d=d_tab, c=c_tab, rel=d_company)

    url = f"{ctx.rest}/sql"
    session, headers = ctx.session, ctx.headers

    async def api(query: str) -> list[dict[str, Any]]:
        raw = await http_send(session, "POST", url, headers, json.dumps({"query": query}).encode(), expect=(200,))
        return json.loads(raw)["rows"]

    async def pg(stmt: sql.Composed) -> list[tuple[Any, ...]]:
        async with pool.connection() as conn:
            return await (await conn.execute(stmt)).fetchall()

    # the endpoint and psycopg answer the same
    by_stage = {r["Stage"]: r["n"] for r in await api(group_q)}
    if by_stage != {stage_label[s]: n for s, n, _, _ in await pg(group_pg)} or sum(by_stage.values()) != rows:
        raise BenchError(f"GROUP BY: the endpoint and psycopg disagree ({by_stage})")
    by_country = {r["Country"]: r["n"] for r in await api(join_q)}
    if by_country != {country_label[c]: n for c, n, _ in await pg(join_pg)} or sum(by_country.values()) != rows:
        raise BenchError(f"join: the endpoint and psycopg disagree ({by_country})")
    page_ids = [r["id"] for r in await api(page_q)]
    if page_ids != [r[0] for r in await pg(page_pg)]:
        raise BenchError("paged join: the endpoint and psycopg disagree")

    def api_op(query: str, expect: int) -> Any:
        payload = json.dumps({"query": query}).encode()

        async def op() -> None:
            raw = await http_send(session, "POST", url, headers, payload, expect=(200,))
            if len(json.loads(raw)["rows"]) != expect:
                raise OperationFailed("row count changed")
        return op

    def pg_op(stmt: sql.Composed, expect: int) -> Any:
        async def op() -> None:
            async with pool.connection() as conn:
                if len(await (await conn.execute(stmt)).fetchall()) != expect:
                    raise OperationFailed("row count changed")
        return op

    note = f"{rows:,} deals, {COMPANIES:,} companies (bulk load {load_s:.0f} s, not measured)"
    figures: list[Figure] = []
    for name, q, stmt, n, target in (
        (names_of(rows)[0], group_q, group_pg, len(by_stage), MAX_RATIO),
        (names_of(rows)[1], join_q, join_pg, len(by_country), MAX_RATIO),
        (f"join along a relation, page of {len(page_ids)}, sequential", page_q, page_pg, len(page_ids), None),
    ):
        api_res, pg_res = await ctx.interleave([api_op(q, n), pg_op(stmt, n)], 1)
        figures.append(latency_figure("sql.analytics", name, api_res, pg_res, max_ratio=target,
                                      baseline_label=BASELINE, tags=ctx.tags,
                                      note=note if target else "informational: per-request overhead dominates"))
    return figures


def names_of(rows: int) -> tuple[str, str]:
    return (f"GROUP BY over {rows:,} rows (count, sum, avg per stage), sequential",
            f"join along a relation over {rows:,} rows, aggregated per country, sequential")
