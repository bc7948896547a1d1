"""Migration m0016 on computed columns made before value types: each gets the type its
kind and formula give it when every stored value fits it (else ``json``), and the
indexes of that type; stored values are untouched; running it again changes nothing."""

from __future__ import annotations

import os

import psycopg
import pytest
from psycopg import sql

from storage import ddl
from storage.migrations import m0016_computed_value_types as m0016
from tests.utils.migrations import run_upgrade

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")


def _upgrade() -> None:
    run_upgrade(DSN, m0016)


def _state(ws_id: int, table_id: int) -> tuple[dict[str, str | None], dict[str, str], list[tuple]]:
    with psycopg.connect(DSN, autocommit=True) as conn:
        types = dict(conn.execute("SELECT name, value_type FROM wds.columns WHERE table_id = %s", (table_id,)).fetchall())
        indexes = dict(conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = %s"
            " AND indexname ~ '_c_'", (f"ws_{ws_id}", f"t_{table_id}")).fetchall())
        rows = conn.execute(sql.SQL("SELECT * FROM {}.{} ORDER BY id").format(
            sql.Identifier(f"ws_{ws_id}"), sql.Identifier(f"t_{table_id}"))).fetchall()
    return types, indexes, rows


def test_old_computed_columns_get_their_types_and_indexes(ws):
    t = ws.create_table("Old", [
        {"name": "Score", "type": "number"},
        {"name": "Double", "type": "formula", "formula": "{Score} * 2"},
        {"name": "Label", "type": "formula", "formula": '"x" & {Score}'},
        {"name": "Again", "type": "formula", "formula": "{Double}"},
        {"name": "Js", "type": "formula", "formula": "return 1", "config": {"language": "javascript"}},
        {"name": "Fetch", "type": "http_request", "config": {"url": "http://127.0.0.1:9/x", "run_on": ["edit"]}},
    ])
    cols = {c["name"]: c for c in t["columns"]}
    rows = [{"fields": {"Score": i}} for i in range(4)]
    assert ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows}).status_code == 200
    schema, table = f"ws_{ws.id}", f"t_{t['id']}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        # a value stored before types existed that is not text: Label must stay json
        conn.execute(sql.SQL("UPDATE {}.{} SET {} = '5'::jsonb WHERE id = (SELECT min(id) FROM {}.{})").format(
            sql.Identifier(schema), sql.Identifier(table), sql.Identifier(f"c_{cols['Label']['id']}"),
            sql.Identifier(schema), sql.Identifier(table)))
        # the metadata and indexes as they were before m0016
        conn.execute("UPDATE wds.columns SET value_type = NULL WHERE table_id = %s", (t["id"],))
        for c in cols.values():
            for name in (f"t_{t['id']}_c_{c['id']}", ddl.trigram_index_name(t["id"], c["id"])):
                if c["type"] != "number":
                    conn.execute(sql.SQL("DROP INDEX IF EXISTS {}.{}").format(
                        sql.Identifier(schema), sql.Identifier(name)))
    _, before_indexes, before_rows = _state(ws.id, t["id"])
    assert set(before_indexes) == {f"t_{t['id']}_c_{cols['Score']['id']}"}
    _upgrade()
    types, indexes, after_rows = _state(ws.id, t["id"])
    assert types == {"Score": None, "Double": "number", "Label": "json", "Again": "number", "Js": "json",
                     "Fetch": "json"}
    assert after_rows == before_rows  # nothing lost, nothing changed
    assert set(indexes) == {f"t_{t['id']}_c_{cols[n]['id']}" for n in ("Score", "Double", "Again")}
    assert "'number'" in indexes[f"t_{t['id']}_c_{cols['Double']['id']}"]
    # and the API sorts on the new index (no error, right order)
    r = ws.api.get(f"/tables/{t['id']}/records", params={"order": "Double.desc", "Double": "lt.6"})
    assert r.status_code == 200, r.text
    assert [x["fields"]["Double"] for x in r.json()["records"]] == [4, 2, 0]
    _upgrade()  # again: nothing changes
    assert _state(ws.id, t["id"]) == (types, indexes, after_rows)


def test_text_columns_get_their_trigram_index(ws):
    t = ws.create_table("OldText", [
        {"name": "Score", "type": "number"},
        {"name": "Label", "type": "formula", "formula": '"x" & {Score}'},
    ])
    label = next(c for c in t["columns"] if c["name"] == "Label")
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("UPDATE wds.columns SET value_type = NULL WHERE id = %s", (label["id"],))
        for name in (f"t_{t['id']}_c_{label['id']}", ddl.trigram_index_name(t["id"], label["id"])):
            conn.execute(sql.SQL("DROP INDEX {}.{}").format(sql.Identifier(f"ws_{ws.id}"), sql.Identifier(name)))
    _upgrade()
    types, indexes, _ = _state(ws.id, t["id"])
    assert types["Label"] == "text"
    assert {f"t_{t['id']}_c_{label['id']}", ddl.trigram_index_name(t["id"], label["id"])} <= set(indexes)
