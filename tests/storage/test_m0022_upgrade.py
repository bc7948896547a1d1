"""Migration m0022 on number formulas indexed the m0016 way (``numeric`` keys): each gets
the ``float8`` key the query compiler now compares with, other indexes and the rows are
untouched, sorted and ranged pages read the new index, and running it again changes
nothing."""

from __future__ import annotations

import os

import psycopg
import pytest
from psycopg import sql

from storage.migrations import m0022_float8_number_keys as m0022
from tests.utils.explain import explain_list
from tests.utils.migrations import indexes_and_rows, run_upgrade

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")

M0016_NUMBER_KEY = "(CASE WHEN jsonb_typeof({c}) = 'number' THEN ({c})::numeric END)"


def _state(ws_id: int, table_id: int) -> tuple[dict[str, str], list[tuple]]:
    return indexes_and_rows(DSN, ws_id, table_id)


@pytest.mark.asyncio
async def test_numeric_keys_of_number_formulas_become_float8(ws):
    t = ws.create_table("OldKeys", [
        {"name": "A", "type": "number"}, {"name": "Name", "type": "text"},
        {"name": "Twice", "type": "formula", "formula": "{A} * 2"},
        {"name": "Label", "type": "formula", "formula": '"n" & {A}'},
    ])
    cols = {c["name"]: c for c in t["columns"]}
    for start in range(0, 3000, 500):  # enough rows that a ranged page reads an index
        rows = [{"fields": {"A": i, "Name": f"n{i}"}} for i in range(start, start + 500)]
        r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows})
        assert r.status_code == 200, r.text
    schema, index = f"ws_{ws.id}", f"t_{t['id']}_c_{cols['Twice']['id']}"
    with psycopg.connect(DSN, autocommit=True) as conn:  # the number formula's index as m0016 made it
        conn.execute(sql.SQL("DROP INDEX {}.{}").format(sql.Identifier(schema), sql.Identifier(index)))
        conn.execute(sql.SQL("CREATE INDEX {} ON {}.{} (({}), id)").format(
            sql.Identifier(index), sql.Identifier(schema), sql.Identifier(f"t_{t['id']}"),
            sql.SQL(M0016_NUMBER_KEY).format(c=sql.Identifier(f"c_{cols['Twice']['id']}"))))
    before, data = _state(ws.id, t["id"])
    assert "numeric" in before[index] and "double precision" not in before[index]

    run_upgrade(DSN, m0022)
    after, same = _state(ws.id, t["id"])
    assert same == data
    assert "double precision" in after[index], after[index]
    assert {k: v for k, v in after.items() if k != index} == {k: v for k, v in before.items() if k != index}

    run_upgrade(DSN, m0022)  # again: nothing changes
    assert _state(ws.id, t["id"]) == (after, same)
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("VACUUM ANALYZE {}.{}").format(sql.Identifier(schema), sql.Identifier(f"t_{t['id']}")))
    nodes = await explain_list(DSN, ws.id, t["id"], [("Twice", "gte.5000"), ("order", "Twice.asc"), ("limit", "5")])
    assert [n.get("Index Name") for n in nodes if "Index" in n["Node Type"]] == [index]
    got = ws.api.get(f"/tables/{t['id']}/records", params={"Twice": "gte.5000", "order": "Twice.asc", "limit": "3"})
    assert [r["fields"]["Twice"] for r in got.json()["records"]] == [5000, 5002, 5004], got.text
