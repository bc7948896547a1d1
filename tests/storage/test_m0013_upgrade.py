"""Migration m0013 on a database whose tables predate it: every text column gains its
trigram index, every table its counter triggers and a base count; running it again
changes nothing (it is what a restart mid-upgrade would do)."""

from __future__ import annotations

import os

import psycopg
import pytest

from storage import ddl
from storage.migrations import m0013_trigrams_row_counts as m0013
from storage.migrations import m0018_row_ranks as m0018
from tests.utils.migrations import run_upgrade

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")


def _state(ws_id: int, table_id: int, column_id: int) -> tuple[bool, list[str], int | None, int]:
    with psycopg.connect(DSN, autocommit=True) as conn:
        index = conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                             (f"ws_{ws_id}.{ddl.trigram_index_name(table_id, column_id)}",)).fetchone()[0]
        triggers = [r[0] for r in conn.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND tgname LIKE 'wds_count%%' ORDER BY 1",
            (f"ws_{ws_id}.t_{table_id}",)).fetchall()]
        # the table's count: its superblocks since m0018 (m0013's rows are of that level)
        counted = conn.execute("SELECT sum(n) FROM wds.row_counts WHERE table_id = %s AND shift = 16",
                               (table_id,)).fetchone()[0]
        rows = conn.execute(f"SELECT count(*) FROM ws_{int(ws_id)}.t_{int(table_id)}").fetchone()[0]
    return index, triggers, counted, rows


def _upgrade() -> None:
    run_upgrade(DSN, m0013)


@pytest.fixture(autouse=True)
def _then_m0018():
    """m0013 replaces the counter's functions with its own; m0018 (the database's state
    for every other test) puts today's back and recounts every table by blocks."""
    yield
    run_upgrade(DSN, m0018)


def test_upgrade_indexes_and_counts_tables_made_before_it(ws):
    t = ws.create_table("Old", [{"name": "Name", "type": "text"}, {"name": "N", "type": "number"}])
    name = next(c for c in t["columns"] if c["name"] == "Name")
    rows = ws.api.post(f"/tables/{t['id']}/records/batch",
                       json={"rows": [{"fields": {"Name": f"n{i}", "N": i}} for i in range(7)], "run_pipeline": False})
    assert rows.status_code == 200, rows.text
    # the table as it was before m0013: no trigram index, no counter
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f"DROP INDEX ws_{ws.id}.{ddl.trigram_index_name(t['id'], name['id'])}")
        for trigger in ("wds_count_ins", "wds_count_del"):
            conn.execute(f"DROP TRIGGER {trigger} ON ws_{ws.id}.t_{t['id']}")
        conn.execute("DELETE FROM wds.row_counts WHERE table_id = %s", (t["id"],))
    assert _state(ws.id, t["id"], name["id"]) == (False, [], None, 7)

    _upgrade()
    after = (True, ["wds_count_del", "wds_count_ins"], 7, 7)
    assert _state(ws.id, t["id"], name["id"]) == after
    _upgrade()
    assert _state(ws.id, t["id"], name["id"]) == after
    # and the counter keeps counting
    ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": "one more"}})
    r = ws.api.get(f"/tables/{t['id']}/records", params={"limit": "1"}, headers={"Prefer": "count=exact"})
    assert r.headers["X-Total-Count"] == "8"
