"""Sorted and range-filtered pages read the column's ``(value, id)`` btree in order
(issue #24): the list's ORDER BY is the value then ``id`` in the same direction, so the
plan has no Sort node either way and a page costs the same at any table size.

Rows are written straight into the physical table; the table and its columns are made
through the API, so the DDL under test is the one the service runs.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.utils.explain import explain_list

ROWS = 30_000
DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")


async def _explain(ws_id: int, table_id: int, params: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return await explain_list(DSN, ws_id, table_id, params)


@pytest.fixture
def big(ws):
    t = ws.create_table("Big", [{"name": "Score", "type": "number"}])
    score = t["columns"][0]
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL("INSERT INTO {}.{} ({}) SELECT (i %% 300)::float8 FROM generate_series(1, %s) AS i").format(
                sql.Identifier(f"ws_{ws.id}"), sql.Identifier(f"t_{t['id']}"), sql.Identifier(f"c_{score['id']}")),
            (ROWS,),
        )
        conn.execute(sql.SQL("ANALYZE {}.{}").format(sql.Identifier(f"ws_{ws.id}"), sql.Identifier(f"t_{t['id']}")))
    return ws, t, score


@pytest.mark.asyncio
@pytest.mark.parametrize("params", [
    [("order", "Score.asc")], [("order", "Score.desc")],
    [("Score", "gte.290"), ("order", "Score.asc")], [("Score", "lt.5"), ("order", "Score.desc")],
])
async def test_sorted_pages_read_the_value_id_index_without_sorting(big, params):
    ws, t, score = big
    nodes = await _explain(ws.id, t["id"], params + [("limit", "20")])
    types = [n["Node Type"] for n in nodes]
    assert not any("Sort" in n for n in types), types
    assert [n.get("Index Name") for n in nodes if n["Node Type"] in ("Index Scan", "Index Only Scan")] \
        == [f"t_{t['id']}_c_{score['id']}"], types


def test_ties_page_by_id_in_the_sort_direction(big):
    ws, t, _ = big
    for direction in ("asc", "desc"):
        r = ws.api.get(f"/tables/{t['id']}/records?order=Score.{direction}&limit=50")
        assert r.status_code == 200, r.text
        rows = [(x["fields"]["Score"], x["id"]) for x in r.json()["records"]]
        assert rows == sorted(rows, reverse=direction == "desc")
