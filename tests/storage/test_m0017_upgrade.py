"""Migration m0017 on text columns indexed the m0015 way (``(value, id)``): each gets the
``(left(value, 200), id)`` btree, other columns' indexes and the rows are untouched,
long text can then be written, and running it again changes nothing."""

from __future__ import annotations

import os
import secrets

import psycopg
import pytest
from psycopg import sql

from storage.migrations import m0017_text_prefix_indexes as m0017
from tests.utils.migrations import indexes_and_rows, run_upgrade

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")


def _upgrade() -> None:
    run_upgrade(DSN, m0017)


def _state(ws_id: int, table_id: int) -> tuple[dict[str, str], list[tuple]]:
    return indexes_and_rows(DSN, ws_id, table_id)


def test_old_text_indexes_get_the_prefix_form(ws):
    t = ws.create_table("Old", [{"name": "Name", "type": "text"}, {"name": "Note", "type": "text"},
                                {"name": "Score", "type": "number"}])
    cols = {c["name"]: c for c in t["columns"]}
    rows = [{"fields": {"Name": f"n{i}", "Note": "x" * i, "Score": i}} for i in range(5)]
    assert ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows}).status_code == 200
    schema, table = f"ws_{ws.id}", f"t_{t['id']}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        for name in ("Name", "Note"):  # the text indexes as m0015 made them
            index, column = f"t_{t['id']}_c_{cols[name]['id']}", f"c_{cols[name]['id']}"
            conn.execute(sql.SQL("DROP INDEX {}.{}").format(sql.Identifier(schema), sql.Identifier(index)))
            conn.execute(sql.SQL("CREATE INDEX {} ON {}.{} ({}, id)").format(
                sql.Identifier(index), sql.Identifier(schema), sql.Identifier(table), sql.Identifier(column)))
    before, data = _state(ws.id, t["id"])
    long = secrets.token_urlsafe(3000)
    refused = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": long}})
    assert refused.status_code == 400 and refused.json()["code"] == "DATABASE_LIMIT_EXCEEDED", refused.text

    _upgrade()
    after, same = _state(ws.id, t["id"])
    assert same == data
    for name in ("Name", "Note"):
        index = f"t_{t['id']}_c_{cols[name]['id']}"
        assert f'"left"(c_{cols[name]["id"]}, 200), id)' in after[index], after[index]
    unchanged = {k: v for k, v in before.items()
                 if k not in {f"t_{t['id']}_c_{cols[n]['id']}" for n in ("Name", "Note")}}
    assert {k: after[k] for k in unchanged} == unchanged and set(after) == set(before)

    _upgrade()  # again: nothing changes
    assert _state(ws.id, t["id"]) == (after, same)
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": long}})
    assert r.status_code == 201, r.text
    got = ws.api.get(f"/tables/{t['id']}/records", params={"Name": f"eq.{long}", "select": "Name"}).json()
    assert [x["fields"]["Name"] for x in got["records"]] == [long]
