"""A data checkbox never set is false in order as in filters and on the record (m0024):
``order=Done.asc`` puts the never-set boxes with the false ones, a cursor pages through
them, its btree is keyed ``(coalesce(value, false), id)`` and serves sorted and filtered
pages, and m0024 rebuilds an index of the old form (the column itself), changing no row,
idempotently."""

from __future__ import annotations

import os

import psycopg
import pytest
from psycopg import sql

from storage.migrations import m0024_checkbox_keys as m0024
from tests.utils.explain import explain_list
from tests.utils.migrations import indexes_and_rows, run_upgrade

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")


def _pages(ws, table_id: int, params: dict[str, str]) -> list[dict]:
    out, after = [], None
    while True:
        q = {**params, **({"after": after} if after else {})}
        r = ws.api.get(f"/tables/{table_id}/records", params=q)
        assert r.status_code == 200, r.text
        out += r.json()["records"]
        after = r.json()["next"]
        if after is None:
            return out


def test_a_never_set_box_sorts_and_pages_with_the_false_ones(ws):
    t = ws.create_table("Boxes", [{"name": "Done", "type": "checkbox"}, {"name": "N", "type": "number"}])
    rows = [{"fields": {"N": i, **({"Done": [True, False, None][i % 4]} if i % 4 < 3 else {})}} for i in range(40)]
    assert ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows}).status_code == 200
    for order in ("Done.asc", "Done.desc", "Done.asc.nullsfirst", "Done.desc.nullslast", "Done.asc,N.desc"):
        for limit in ("3", "100"):
            got = _pages(ws, t["id"], {"order": order, "limit": limit})
            shown = [r["fields"]["Done"] for r in got]
            assert len(got) == 40
            assert shown == sorted(shown, reverse=order.startswith("Done.desc")), (order, limit, shown)
            ties = [r["id"] for r in got if r["fields"]["Done"] is False]
            # ties by the next term: id the way the first term runs, or N (= id - 1) descending
            assert ties == sorted(ties, reverse=order.startswith("Done.desc") or "N.desc" in order), (order, ties)
    # filters agree with the order: 30 false (10 set false, 20 never set), 10 true
    for q, n in (("eq.false", 30), ("is.false", 30), ("neq.true", 30), ("eq.true", 10), ("is.null", 0),
                 ("not.is.null", 40), ("in.(false)", 30)):
        got = _pages(ws, t["id"], {"Done": q, "order": "Done.desc", "limit": "7"})
        assert len(got) == n, (q, len(got))


@pytest.mark.asyncio
async def test_the_checkbox_btree_is_the_coalesced_key_and_m0024_rebuilds_the_old_one(ws):
    t = ws.create_table("OldBoxes", [{"name": "Done", "type": "checkbox"}, {"name": "Name", "type": "text"}])
    col = next(c for c in t["columns"] if c["name"] == "Done")
    for start in range(0, 3000, 500):  # enough rows that a filtered page reads an index
        rows = [{"fields": {"Name": f"n{i}", **({"Done": True} if i % 100 == 0 else {})}}
                for i in range(start, start + 500)]
        assert ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows}).status_code == 200
    schema, table, index = f"ws_{ws.id}", f"t_{t['id']}", f"t_{t['id']}_c_{col['id']}"
    made, data = indexes_and_rows(DSN, ws.id, t["id"])
    assert "COALESCE(" in made[index], made[index]
    with psycopg.connect(DSN, autocommit=True) as conn:  # the index as m0015 made it
        conn.execute(sql.SQL("DROP INDEX {}.{}").format(sql.Identifier(schema), sql.Identifier(index)))
        conn.execute(sql.SQL("CREATE INDEX {} ON {}.{} ({}, id)").format(
            sql.Identifier(index), sql.Identifier(schema), sql.Identifier(table),
            sql.Identifier(f"c_{col['id']}")))
    before, _ = indexes_and_rows(DSN, ws.id, t["id"])
    assert "COALESCE(" not in before[index]

    run_upgrade(DSN, m0024)
    after, same = indexes_and_rows(DSN, ws.id, t["id"])
    assert same == data
    assert after == made
    run_upgrade(DSN, m0024)  # again: nothing changes
    assert indexes_and_rows(DSN, ws.id, t["id"]) == (after, same)

    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("VACUUM ANALYZE {}.{}").format(sql.Identifier(schema), sql.Identifier(table)))
    for params in ([("Done", "eq.true"), ("limit", "5")], [("order", "Done.desc"), ("limit", "5")]):
        nodes = await explain_list(DSN, ws.id, t["id"], params)
        assert index in [n.get("Index Name") for n in nodes if "Index" in n["Node Type"]], (params, nodes)
    got = ws.api.get(f"/tables/{t['id']}/records", params={"Done": "eq.true", "limit": "100"})
    assert [r["fields"]["Name"] for r in got.json()["records"]] == [f"n{i}" for i in range(0, 3000, 100)]
