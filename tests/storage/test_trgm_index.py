"""Contains search reads a trigram index (issue #24): every text column gets a GIN
``pg_trgm`` index on :func:`storage.ddl.search_expr` of the column, and the list query the
API sends for ``Name=ilike.*qzb*`` is planned as a Bitmap Index Scan on it.

A trigram index serves patterns with at least three characters between wildcards: from
``*qz*`` pg_trgm extracts no trigram at all, so such a search reads every row (the
planner then rightly prefers a sequential scan; docs/decisions.md, "Contains search").

Rows are written straight into the physical table (20,000 through the REST batch path
would take far longer); the table and its column are made through the API, so the DDL
under test is the one the service runs.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
import pytest
from psycopg import sql

from storage import ddl
from tests.utils.explain import explain_list

ROWS = 20_000
DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")


async def _explain(ws_id: int, table_id: int, params: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return await explain_list(DSN, ws_id, table_id, params)


@pytest.fixture
def big(ws):
    t = ws.create_table("Big", [{"name": "Name", "type": "text"}, {"name": "Score", "type": "number"}])
    name = next(c for c in t["columns"] if c["name"] == "Name")
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.{} ({}) SELECT CASE WHEN i %% 997 = 0 THEN 'aqzb ' || i ELSE md5(i::text) END"
                " FROM generate_series(1, %s) AS i"
            ).format(sql.Identifier(f"ws_{ws.id}"), sql.Identifier(f"t_{t['id']}"),
                     sql.Identifier(f"c_{name['id']}")),
            (ROWS,),
        )
        # as autovacuum does after a bulk insert: statistics, and the GIN pending list
        # (fastupdate) merged into the index proper
        conn.execute(sql.SQL("VACUUM ANALYZE {}.{}").format(sql.Identifier(f"ws_{ws.id}"),
                                                            sql.Identifier(f"t_{t['id']}")))
    return ws, t, name


@pytest.mark.asyncio
async def test_contains_search_uses_the_trigram_index(big):
    ws, t, name = big
    nodes = await _explain(ws.id, t["id"], [("Name", "ilike.*qzb*")])
    index = ddl.trigram_index_name(t["id"], name["id"])
    scans = [n for n in nodes if n["Node Type"] == "Bitmap Index Scan"]
    assert [n["Index Name"] for n in scans] == [index], [n["Node Type"] for n in nodes]
    assert not any(n["Node Type"] == "Seq Scan" for n in nodes)
    # and the answer is the rows holding "qz" (case-insensitively), found through it
    r = ws.api.get(f"/tables/{t['id']}/records", params={"Name": "ilike.*QZB*", "limit": "1000"},
                   headers={"Prefer": "count=exact"})
    assert r.status_code == 200, r.text
    assert r.headers["X-Total-Count"] == str(ROWS // 997)
    assert all("qzb" in rec["fields"]["Name"] for rec in r.json()["records"])


@pytest.mark.asyncio
async def test_case_sensitive_like_uses_it_too(big):
    ws, t, name = big
    nodes = await _explain(ws.id, t["id"], [("Name", "like.*aqzb*")])
    assert ddl.trigram_index_name(t["id"], name["id"]) in [n.get("Index Name") for n in nodes]


def test_only_text_columns_get_one(ws):
    t = ws.create_table("Kinds", [{"name": "Name", "type": "text"}, {"name": "Score", "type": "number"},
                                  {"name": "State", "type": "single_select", "options": ["a"]}])
    with psycopg.connect(DSN, autocommit=True) as conn:
        found = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = %s AND indexdef LIKE %s",
            (f"ws_{ws.id}", f"t_{t['id']}", "%gin_trgm_ops%"),
        ).fetchall()
    name = next(c for c in t["columns"] if c["name"] == "Name")
    assert [r[0] for r in found] == [ddl.trigram_index_name(t["id"], name["id"])]


def test_a_column_retyped_to_text_gets_one_and_away_from_text_loses_it(ws):
    t = ws.create_table("Retype", [{"name": "Code", "type": "number"}])
    col = t["columns"][0]
    index = ddl.trigram_index_name(t["id"], col["id"])

    def has_index() -> bool:
        with psycopg.connect(DSN, autocommit=True) as conn:
            return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"ws_{ws.id}.{index}",)).fetchone()[0]

    assert not has_index()
    r = ws.api.patch(f"/tables/{t['id']}/columns/{col['id']}", json={"type": "text"})
    assert r.status_code == 200, r.text
    assert has_index()
    r = ws.api.patch(f"/tables/{t['id']}/columns/{col['id']}", json={"type": "number"})
    assert r.status_code == 200, r.text
    assert not has_index()
