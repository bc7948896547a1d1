"""Migration m0018 on a database whose counters predate it: every table's counter is
recounted by blocks of ids (its total unchanged), the trigger writes blocks from then on,
and deep pages by offset of the table are right at once; running it again changes
nothing (it is what a restart mid-upgrade would do)."""

from __future__ import annotations

import os

import psycopg
import pytest

from storage.migrations import m0018_row_ranks as m0018
from tests.utils.migrations import run_upgrade

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")


def _blocks(table_id: int, shift: int) -> dict[int, int]:
    with psycopg.connect(DSN, autocommit=True) as conn:
        return dict(conn.execute(
            "SELECT block, sum(n)::bigint FROM wds.row_counts WHERE table_id = %s AND shift = %s"
            " AND block IS NOT NULL GROUP BY block HAVING sum(n) <> 0", (table_id, shift)).fetchall())


def _rows(ws_id: int, table_id: int, shift: int) -> dict[int, int]:
    with psycopg.connect(DSN, autocommit=True) as conn:
        return dict(conn.execute(f"SELECT id >> {shift}, count(*) FROM ws_{int(ws_id)}.t_{int(table_id)}"
                                 " GROUP BY 1").fetchall())


def test_upgrade_counts_blocks_of_tables_counted_before_it(ws):
    t = ws.create_table("Old", [{"name": "N", "type": "number"}])
    target = f"ws_{ws.id}.t_{t['id']}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f"INSERT INTO {target} (id, c_{t['columns'][0]['id']})"
                     " SELECT i * 13, i FROM generate_series(1, 9000) AS i")  # ids up to 117,000
        # the counter as m0013 left it: one total, no blocks
        conn.execute("DELETE FROM wds.row_counts WHERE table_id = %s", (t["id"],))
        conn.execute("INSERT INTO wds.row_counts (workspace_id, table_id, n) VALUES (%s, %s, 9000)",
                     (ws.id, t["id"]))
    assert _blocks(t["id"], 10) == {}

    for _ in range(2):
        run_upgrade(DSN, m0018)
        for shift in (10, 16):
            assert _blocks(t["id"], shift) == _rows(ws.id, t["id"], shift)
        r = ws.api.get(f"/tables/{t['id']}/records", params={"limit": "2", "offset": "8500"},
                       headers={"Prefer": "count=exact"})
        assert r.headers["X-Total-Count"] == "9000"
        assert [x["id"] for x in r.json()["records"]] == [8501 * 13, 8502 * 13]
    # and the trigger keeps the blocks
    made = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"N": 1}}).json()["id"]
    assert _blocks(t["id"], 10).get(made >> 10) == _rows(ws.id, t["id"], 10)[made >> 10]
