"""Upgrading a database written by the previous release (issue #21, m0007).

The previous release stored column *names* in formulas, configs and views and had no
``wds.columns.broken``. The test writes exactly that state (the name-form text the
previous release stored, through psycopg), runs the migration, and checks through a
fresh API process that formulas, templates, source columns and views give the same
answers, that a rename now carries, and that a formula that named a missing column (which
the previous release accepted and computed as blank) is marked broken instead.
"""

from __future__ import annotations

import httpx
import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from storage.migrations import migrate
from tests.conftest import api_process


def _client(base_url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=f"{base_url}/functions/v1/rest-api", headers={"Authorization": f"Bearer {token}"},
                        timeout=60)


def test_upgrade_moves_names_to_ids_and_keeps_answers(ws, services):
    t = ws.create_table("Orders", [
        {"name": "Qty", "type": "number"},
        {"name": "Price", "type": "number"},
        {"name": "Payload", "type": "text"},
        {"name": "Total", "type": "formula", "formula": "{Qty} * {Price}"},
        {"name": "Parsed", "type": "json_parser", "config": {"source_column": "Payload", "path": "a"}},
        {"name": "Note", "type": "formula", "formula": 'CONCAT("n=", {Qty})'},
    ])
    cols = {c["name"]: c for c in t["columns"]}
    ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": [
        {"fields": {"Qty": q, "Price": 2, "Payload": '{"a": %d}' % q}} for q in (1, 5, 9)]})
    view = ws.api.post(f"/tables/{t['id']}/views", json={
        "name": "Big", "view_type": "grid", "config": {"filters": {"Qty": "gte.5"}, "sort": "Total.desc"}}).json()
    before = [r["fields"] for r in ws.api.get(f"/tables/{t['id']}/records?view={view['id']}").json()["records"]]

    # the previous release's state: names in the metadata, no broken column, m0007 not applied
    with psycopg.connect(services.pg.dsn, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("UPDATE wds.columns SET formula = %s, config = %s WHERE id = %s",
                     ("{Qty} * {Price}", Jsonb({}), cols["Total"]["id"]))
        conn.execute("UPDATE wds.columns SET config = %s WHERE id = %s",
                     (Jsonb({"source_column": "Payload", "path": "a"}), cols["Parsed"]["id"]))
        conn.execute("UPDATE wds.columns SET formula = %s WHERE id = %s",
                     ('CONCAT("n=", {Qty}, {Gone})', cols["Note"]["id"]))
        conn.execute("UPDATE wds.views SET config = %s WHERE id = %s",
                     (Jsonb({"filters": {"Qty": "gte.5"}, "sort": "Total.desc"}), view["id"]))
        conn.execute("ALTER TABLE wds.columns DROP COLUMN broken")
        conn.execute("DELETE FROM wds.schema_migrations WHERE version = 7")

    assert "m0007_references_by_id" in migrate(services.pg.dsn)

    with psycopg.connect(services.pg.dsn, row_factory=dict_row) as conn:
        stored = conn.execute("SELECT id, formula, config, broken FROM wds.columns WHERE table_id = %s",
                              (t["id"],)).fetchall()
    by_id = {r["id"]: r for r in stored}
    assert by_id[cols["Total"]["id"]]["formula"] == f"{{@{cols['Qty']['id']}}} * {{@{cols['Price']['id']}}}"
    assert by_id[cols["Parsed"]["id"]]["config"]["source_column"] == f"@{cols['Payload']['id']}"
    assert "Gone" in by_id[cols["Note"]["id"]]["broken"]

    with api_process(services, name="upgraded") as url, _client(url, ws.builder_token) as api:
        after = [r["fields"] for r in api.get(f"/tables/{t['id']}/records?view={view['id']}").json()["records"]]
        assert after == before
        listed = {c["name"]: c for c in api.get(f"/tables/{t['id']}/columns").json()}
        assert listed["Total"]["formula"] == "{Qty} * {Price}" and listed["Total"]["status"] == "ok"
        assert listed["Note"]["status"] == "error" and listed["Note"]["formula"] == 'CONCAT("n=", {Qty}, {Gone})'
        assert api.patch(f"/tables/{t['id']}/columns/{cols['Qty']['id']}", json={"name": "Units"}).status_code == 200
        assert api.get(f"/tables/{t['id']}/columns/{cols['Total']['id']}").json()["formula"] == "{Units} * {Price}"
        assert api.get(f"/tables/{t['id']}/views/{view['id']}").json()["config"]["filters"] == {"Units": "gte.5"}
        rec = api.post(f"/tables/{t['id']}/records", json={"fields": {"Units": 4, "Price": 3, "Payload": '{"a": 7}'}})
        assert rec.json()["fields"]["Total"] == 12 and rec.json()["fields"]["Parsed"] == 7
        assert rec.json()["fields"]["Note"] is None and "Note" in rec.json()["pipeline"]["errors"]
