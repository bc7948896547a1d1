"""Query shapes of the one query contract (docs/query.md), each beside its plain form in
the same run: GET by id with ``select`` and with ``expand`` beside the plain GET, and the
list with an ``or`` group beside the plain filtered list (target: within 10 %)."""

from __future__ import annotations

import random
from collections.abc import Callable
from urllib.parse import quote

from bench.context import BenchContext, BenchError
from bench.load import Operation, OperationFailed
from bench.report import Figure, Target
from bench.scenarios.registry import scenario

WITHIN = Target(0.90, "≥ 90 % of the plain form")
PLAIN_LIST = "Score=gt.500&Status=eq.a&limit=100&offset=0&order=id.asc"
OR_LIST = f"or={quote('(Score.gt.500,Status.eq.a)')}&limit=100&offset=0&order=id.asc"
RELATED_ROWS = 500


def _get(ctx: BenchContext, url_of: Callable[[], str]) -> Operation:
    session, headers = ctx.session, {"Authorization": ctx.headers["Authorization"]}

    async def op() -> None:
        async with session.get(url_of(), headers=headers) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise OperationFailed(f"HTTP {resp.status}: {body[:200]!r}")

    return op


@scenario("records.query_shapes", title="GET by id with select / expand, list with an or group, vs plain",
          target=WITHIN.text)
async def query_shapes(ctx: BenchContext) -> list[Figure]:
    table = await ctx.seeded_table()
    ids = table.record_ids
    rnd = random.Random(7)
    base = f"{ctx.rest}/tables/{table.id}/records"
    # a table relating to the seeded one, for expand
    rel = await ctx.call("POST", f"{ctx.rest}/tables", {
        "name": f"bench-rel-{rnd.randrange(10**6)}", "icon": "table",
        "columns": [{"name": "Name", "type": "text"},
                    {"name": "Ref", "type": "relation", "relation_table_id": table.id}]})
    out = await ctx.call("POST", f"{ctx.rest}/tables/{rel['id']}/records/batch", {
        "rows": [{"fields": {"Name": f"r{i}", "Ref": ids[i % len(ids)]}} for i in range(RELATED_ROWS)],
        "run_pipeline": False})
    rel_ids = [r["record"]["id"] for r in out["results"] if "record" in r]
    if len(rel_ids) != RELATED_ROWS:
        raise BenchError("could not seed the related table")
    rel_base = f"{ctx.rest}/tables/{rel['id']}/records"
    expanded = await ctx.call("GET", f"{rel_base}/{rel_ids[0]}?expand=Ref")
    if not isinstance(expanded["fields"]["Ref"], dict):
        raise BenchError(f"expand did not embed: {expanded}")

    plain_get = _get(ctx, lambda: f"{base}/{rnd.choice(ids)}")
    select_get = _get(ctx, lambda: f"{base}/{rnd.choice(ids)}?select=Name,Score")
    plain_rel = _get(ctx, lambda: f"{rel_base}/{rnd.choice(rel_ids)}")
    expand_get = _get(ctx, lambda: f"{rel_base}/{rnd.choice(rel_ids)}?expand=Ref")
    plain_list = _get(ctx, lambda: f"{base}?{PLAIN_LIST}")
    or_list = _get(ctx, lambda: f"{base}?{OR_LIST}")

    figures = []
    conc = ctx.config.concurrency
    for variant, plain, label in (
        (select_get, plain_get, "GET by id ?select=Name,Score"),
        (expand_get, plain_rel, "GET by id ?expand=Ref"),
        (or_list, plain_list, "list or=(Score.gt.500,Status.eq.a), page 100"),
    ):
        results = await ctx.interleave([variant, plain], conc)
        figures.append(ctx.figure("records.query_shapes", f"{label}, {conc} clients", results[0], results[1],
                                  target=WITHIN, baseline_label="plain form"))
    return figures
