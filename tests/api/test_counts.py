"""Counts users can afford (issue #24): ``Prefer: count=exact|planned|estimated`` with
PostgREST's meaning, the MCP ``list_records`` ``count`` argument, and the row counter that
serves exact counts of unfiltered tables.

Rows are written straight into the physical tables (tens of thousands through the REST
batch path would take far longer); those statements fire the row-counter triggers like
any writer's. Two number columns hold the same value in every row, so the planner, which
takes them for independent, misjudges the rows matching a filter on both: its estimate
then differs from the exact count, which tells the two apart.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.mcp.conftest import call_tool_sync

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")

BIG = 150_000  # above the 100,000 estimated rows where count=estimated stops counting
SMALL = 3_000


class Loaded:
    def __init__(self, ws: Any, table: dict[str, Any]) -> None:
        self.ws, self.table = ws, table
        self.cols = {c["name"]: f"c_{c['id']}" for c in table["columns"]}
        self.target = sql.Identifier(f"ws_{ws.id}", f"t_{table['id']}")
        self.url = f"/tables/{table['id']}/records"

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run ``query`` with ``{t}`` the physical table and ``{A}``, ``{B}`` its columns."""
        text = sql.SQL(query).format(t=self.target, **{k: sql.Identifier(v) for k, v in self.cols.items()})
        with psycopg.connect(DSN, autocommit=True) as conn:
            cur = conn.execute(text, params)
            return cur.fetchall() if cur.description else []

    def estimate(self, where: str) -> int:
        """The planner's row estimate for ``where``, asked directly."""
        row = self.sql("EXPLAIN (FORMAT JSON) SELECT 1 FROM {t} WHERE " + where)[0]
        return int(row[0][0]["Plan"]["Plan Rows"])

    def get(self, params: dict[str, str], prefer: str | None) -> Any:
        r = self.ws.api.get(self.url, params=params, headers={"Prefer": prefer} if prefer else {})
        assert r.status_code == 200, r.text
        return r


def _load(ws: Any, rows: int) -> Loaded:
    t = ws.create_table(f"Rows{rows}", [{"name": "A", "type": "number"}, {"name": "B", "type": "number"},
                                         {"name": "Name", "type": "text"}])
    loaded = Loaded(ws, t)
    # change capture off for the load (a realtime event per row is not what is tested); the
    # row counter stays on
    loaded.sql("ALTER TABLE {t} DISABLE TRIGGER wds_changes_ins")
    loaded.sql("INSERT INTO {t} ({A}, {B}, {Name}) SELECT i, i, 'n' || i FROM generate_series(1, %s) AS i", (rows,))
    loaded.sql("ALTER TABLE {t} ENABLE TRIGGER wds_changes_ins")
    loaded.sql("ANALYZE {t}")
    return loaded


@pytest.fixture
def small(ws: Any) -> Loaded:
    return _load(ws, SMALL)


@pytest.fixture
def big(ws: Any) -> Loaded:
    return _load(ws, BIG)


def _total(r: Any) -> int:
    total = r.headers["X-Total-Count"]
    assert r.headers["Content-Range"].endswith(f"/{total}")
    return int(total)


def test_planned_count_is_the_planners_estimate(small: Loaded) -> None:
    where = {"A": "gt.2700", "B": "gt.2700"}
    estimate = small.estimate("{A} > 2700 AND {B} > 2700")
    assert estimate != 300  # the exact count: the planner takes A and B for independent
    r = small.get({**where, "limit": "25"}, "count=planned")
    assert _total(r) == estimate
    n = len(r.json()["records"])
    assert r.headers["Content-Range"] == f"0-{n - 1}/{estimate}"
    # exact still counts every match
    assert _total(small.get(where, "count=exact")) == 300


def test_estimated_count_is_exact_below_the_threshold(small: Loaded) -> None:
    r = small.get({"A": "gt.2700", "B": "gt.2700"}, "count=estimated")
    assert _total(r) == 300


def test_estimated_count_is_planned_above_the_threshold(big: Loaded) -> None:
    estimate = big.estimate("{A} > 1000 AND {B} > 1000")
    assert 100_000 <= estimate != BIG - 1000
    where = {"A": "gt.1000", "B": "gt.1000", "limit": "10"}
    assert _total(big.get(where, "count=estimated")) == estimate
    assert _total(big.get(where, "count=planned")) == estimate
    assert _total(big.get(where, "count=exact")) == BIG - 1000
    # an unfiltered table's count is exact in every mode but planned (its counter is free)
    assert _total(big.get({"limit": "1"}, "count=estimated")) == BIG


def test_count_mode_among_other_preferences_and_unknown_modes(small: Loaded) -> None:
    r = small.get({"A": "lte.10"}, "return=representation, count=estimated")
    assert _total(r) == 10
    for prefer in ("count=none", "count=exactly", "count=", "xcount=exact"):
        r = small.get({"A": "lte.10"}, prefer)
        assert "X-Total-Count" not in r.headers and "Content-Range" not in r.headers, prefer


def test_the_count_parameter_names_the_same_modes_as_prefer(small: Loaded) -> None:
    """``?count=planned`` and ``?count=estimated`` were 400 while ``Prefer`` and MCP took
    them: every door takes the three modes."""
    where = {"A": "gt.2700", "B": "gt.2700", "limit": "25"}
    estimate = small.estimate("{A} > 2700 AND {B} > 2700")
    assert _total(small.get({**where, "count": "planned"}, "")) == estimate
    assert _total(small.get({**where, "count": "estimated"}, "")) == 300
    assert _total(small.get({**where, "count": "EXACT"}, "")) == 300
    assert _total(small.get({**where, "count": "planned"}, "count=exact")) == 300  # the header wins
    bad = small.ws.api.get(small.url, params={**where, "count": "exactly"})
    assert bad.status_code == 400 and bad.json()["code"] == "VALIDATION_ERROR", bad.text


def test_unfiltered_exact_count_reads_the_row_counter(small: Loaded) -> None:
    table_id = small.table["id"]
    assert _total(small.get({"limit": "1"}, "count=exact")) == SMALL
    # shift the counter by hand: the unfiltered count follows it, a filtered count does not
    small.sql("INSERT INTO wds.row_counts (workspace_id, table_id, n) VALUES (%s, %s, 1000)",
              (small.ws.id, table_id))
    assert _total(small.get({"limit": "1"}, "count=exact")) == SMALL + 1000
    assert _total(small.get({"A": "gt.0"}, "count=exact")) == SMALL
    assert small.sql("SELECT wds.recount_rows(%s, %s)", (small.ws.id, table_id)) == [(SMALL,)]
    assert _total(small.get({"limit": "1"}, "count=exact")) == SMALL


def test_row_counter_follows_every_kind_of_write(small: Loaded) -> None:
    ws, table_id, url = small.ws, small.table["id"], small.url
    made = ws.api.post(url, json={"fields": {"A": 1}}).json()["id"]
    batch = ws.api.post(f"{url}/batch", json={"rows": [{"fields": {"A": i}} for i in range(5)]})
    assert batch.status_code == 200, batch.text
    assert ws.api.delete(f"{url}/{made}").status_code == 200
    for i in range(40):  # enough single-row statements for the counter to fold its rows
        small.sql("INSERT INTO {t} ({A}) VALUES (%s)", (i,))
    small.sql("DELETE FROM {t} WHERE {A} <= 100")
    small.sql("UPDATE {t} SET {B} = 0 WHERE {A} > 2990")
    exact = small.sql("SELECT count(*) FROM {t}")[0][0]
    assert _total(small.get({"limit": "1"}, "count=exact")) == exact
    kept = small.sql("SELECT count(*), sum(n) FILTER (WHERE shift = 16) FROM wds.row_counts WHERE table_id = %s",
                     (table_id,))[0]
    # folded, not two rows (a block's and a superblock's) per statement
    assert kept[1] == exact and kept[0] <= 40, kept
    # a deleted table takes its counter with it
    assert ws.api.delete(f"/tables/{table_id}").status_code in (200, 204)
    assert small.sql("SELECT count(*) FROM wds.row_counts WHERE table_id = %s", (table_id,)) == [(0,)]


def test_concurrent_writers_do_not_wait_for_each_other_on_the_counter(small: Loaded) -> None:
    text = sql.SQL("INSERT INTO {} ({}) VALUES (1)").format(small.target, sql.Identifier(small.cols["A"]))
    with psycopg.connect(DSN) as first, psycopg.connect(DSN) as second:
        first.execute(text)  # open transaction, not committed
        second.execute("SET lock_timeout = '2s'")  # waiting would fail instead of hang
        second.execute(text)
        second.commit()
        first.commit()
    assert _total(small.get({"limit": "1"}, "count=exact")) == SMALL + 2
    counted = small.sql("SELECT sum(n) FROM wds.row_counts WHERE table_id = %s AND shift = 16", (small.table["id"],))
    assert counted == [(SMALL + 2,)]


def test_mcp_list_records_takes_a_count_mode(small: Loaded, base_url: str) -> None:
    ws, table_id = small.ws, small.table["id"]
    args = {"table_id": table_id, "filters": {"A": "gt.2700", "B": "gt.2700"}, "limit": 10}
    estimate = small.estimate("{A} > 2700 AND {B} > 2700")

    def call(count: Any) -> dict[str, Any]:
        return call_tool_sync(base_url, ws.builder_token, "list_records", {**args, "count": count})

    planned = call("planned")
    assert planned["total"] == estimate and planned["has_more"] is True and len(planned["records"]) == 10
    estimated = call("estimated")
    assert estimated["total"] == 300 and estimated["has_more"] is True
    exact, true = call("exact"), call(True)
    assert exact == true and exact["total"] == 300 and "290 more record(s)" in exact["hint"]
    assert "total" not in call(False)
