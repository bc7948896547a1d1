"""Schema changes (issue #21).

* ``schema.rename``: renaming a column that 50 formula columns and 20 views use (every
  one of them reads back with the new name) — target p50 < 100 ms — beside renaming a
  column nothing uses, on the same table in the same run. References are stored by id,
  so the rename is one metadata row whatever uses the column; the figure shows it.
"""

from __future__ import annotations

import itertools

from bench.context import BenchContext, NotMeasurable, budget_figure, latency_figure, not_measured
from bench.load import OperationFailed, http_send
from bench.report import Figure
from bench.scenarios.registry import scenario

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
