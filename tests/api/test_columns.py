"""Columns: list, get, create, patch (rename, options, type), delete."""

from __future__ import annotations

import time

import pytest


def test_create_get_and_list_columns(ws):
    t = ws.create_table("C")
    r = ws.api.post(f"/tables/{t['id']}/columns", json={"name": "Score", "type": "number", "required": True})
    assert r.status_code == 201, r.text
    col = r.json()
    assert col["name"] == "Score" and col["type"] == "number" and col["required"] is True and col["computed"] is False
    assert ws.api.get(f"/tables/{t['id']}/columns/{col['id']}").json()["name"] == "Score"
    assert [c["id"] for c in ws.api.get(f"/tables/{t['id']}/columns").json()] == [col["id"]]


def test_column_type_alias_is_accepted(ws):
    t = ws.create_table("C")
    r = ws.api.post(f"/tables/{t['id']}/columns", json={"name": "D", "column_type": "date"})
    assert r.status_code == 201 and r.json()["type"] == "date"


def test_rename_column_keeps_its_values(ws):
    t = ws.create_table("C", [{"name": "Old", "type": "text"}])
    col = t["columns"][0]
    rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Old": "kept"}}).json()
    r = ws.api.patch(f"/tables/{t['id']}/columns/{col['id']}", json={"name": "New"})
    assert r.status_code == 200 and r.json()["name"] == "New"
    assert ws.api.get(f"/tables/{t['id']}/records/{rec['id']}").json()["fields"] == {"New": "kept"}


def test_editing_options_keeps_ids_and_clears_removed_values(ws):
    t = ws.create_table("C", [{"name": "S", "type": "single_select", "options": ["a", "b"]},
                              {"name": "M", "type": "multi_select", "options": ["x", "y"]}])
    s, m = t["columns"]
    a_id, b_id = (o["id"] for o in s["options"])
    x_id, y_id = (o["id"] for o in m["options"])
    rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"S": "b", "M": ["x", "y"]}}).json()
    r = ws.api.patch(f"/tables/{t['id']}/columns/{s['id']}", json={"options": [{"id": a_id, "label": "A!", "color": "green"}, "c"],
                                                                  "allow_loss": True})
    assert r.status_code == 200, r.text
    opts = r.json()["options"]
    assert opts[0] == {"id": a_id, "label": "A!", "color": "green"} and opts[1]["label"] == "c"
    # removing an option in use drops values: only when the caller asks (test_column_retype.py)
    assert ws.api.patch(f"/tables/{t['id']}/columns/{m['id']}", json={"options": ["x"]}).status_code == 409
    assert ws.api.patch(f"/tables/{t['id']}/columns/{m['id']}", json={"options": ["x"], "allow_loss": True}).status_code == 200
    got = ws.api.get(f"/tables/{t['id']}/records/{rec['id']}").json()["fields"]
    assert got == {"S": None, "M": [x_id]}


def test_bad_option_color_is_refused(ws):
    t = ws.create_table("C", [{"name": "S", "type": "single_select", "options": ["a"]}])
    r = ws.api.patch(f"/tables/{t['id']}/columns/{t['columns'][0]['id']}", json={"options": [{"label": "a", "color": "mauve"}]})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"


def test_duplicate_column_name_is_a_conflict(ws):
    t = ws.create_table("C", [{"name": "A", "type": "text"}])
    r = ws.api.post(f"/tables/{t['id']}/columns", json={"name": "A", "type": "number"})
    assert r.status_code == 409 and r.json()["code"] == "CONFLICT"


def test_relation_column_needs_a_table_of_this_workspace(ws, make_workspace):
    target = ws.create_table("Target", [{"name": "Name", "type": "text"}])
    t = ws.create_table("Src")
    r = ws.api.post(f"/tables/{t['id']}/columns", json={"name": "L", "type": "relation", "relation_table_id": target["id"]})
    assert r.status_code == 201, r.text
    assert r.json()["relation_table"] == target["id"]
    assert r.json()["relation_label_column"] == target["columns"][0]["id"]
    other = make_workspace().create_table("Elsewhere")
    r = ws.api.post(f"/tables/{t['id']}/columns", json={"name": "L2", "type": "relation", "relation_table_id": other["id"]})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"
    r = ws.api.post(f"/tables/{t['id']}/columns", json={"name": "L3", "type": "relation", "relation_table_id": target["id"],
                                                        "relation_source_column_id": 999999})
    assert r.status_code == 400


def test_change_type_to_text_keeps_a_readable_value(ws):
    t = ws.create_table("C", [{"name": "N", "type": "number"}])
    rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"N": 42}}).json()
    r = ws.api.patch(f"/tables/{t['id']}/columns/{t['columns'][0]['id']}", json={"type": "text"})
    assert r.status_code == 200 and r.json()["type"] == "text"
    assert ws.api.get(f"/tables/{t['id']}/records/{rec['id']}").json()["fields"]["N"] == "42"


def test_delete_column_removes_its_values(ws):
    t = ws.create_table("C", [{"name": "A", "type": "text"}, {"name": "B", "type": "text"}])
    rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": "1", "B": "2"}}).json()
    r = ws.api.delete(f"/tables/{t['id']}/columns/{t['columns'][0]['id']}")
    assert r.status_code == 200 and r.json()["deleted"] is True
    assert ws.api.get(f"/tables/{t['id']}/records/{rec['id']}").json()["fields"] == {"B": "2"}
    assert ws.api.get(f"/tables/{t['id']}/columns/{t['columns'][0]['id']}").status_code == 404


def test_patch_with_nothing_or_unknown_fields_is_refused(ws):
    t = ws.create_table("C", [{"name": "A", "type": "text"}])
    cid = t["columns"][0]["id"]
    assert ws.api.patch(f"/tables/{t['id']}/columns/{cid}", json={}).json()["code"] == "VALIDATION_ERROR"
    assert ws.api.patch(f"/tables/{t['id']}/columns/{cid}", json={"colour": "x"}).json()["code"] == "VALIDATION_ERROR"


@pytest.mark.parametrize("col", [
    {"name": "F", "type": "fetch_records", "config": {"table_id": "Cfg", "limit": 0}},
    {"name": "F", "type": "fetch_records", "config": {"table_id": "Cfg", "limit": 101}},
    {"name": "F", "type": "fetch_records", "config": {"table_id": "Cfg", "limit": "5"}},
    {"name": "F", "type": "fetch_records", "config": {"table_id": "Cfg", "filters": ["A.eq.1"]}},
    {"name": "L", "type": "loop", "config": {"source_column": "A", "step": {"type": "delay", "config": {"seconds": 1}}}},
    {"name": "L", "type": "loop", "config": {"source_column": "A", "step": {"type": "loop", "config": {}}}},
    {"name": "L", "type": "loop", "config": {"source_column": "A",
                                             "step": {"type": "fetch_records", "config": {"table_id": "Cfg", "limit": 500}}}},
    {"name": "D", "type": "delay", "config": {"seconds": -1}},
    {"name": "D", "type": "delay", "config": {"seconds": 1e12}},
    {"name": "D", "type": "delay", "config": {"seconds": "soon"}},
    {"name": "J", "type": "json_parser", "config": {"source_column": "A", "path": "[[[["}},
    {"name": "J", "type": "json_parser", "config": {"source_column": "A"}},
])
def test_a_config_every_run_would_refuse_is_refused_when_the_column_is_written(ws, col):
    """What a run refuses for every record (a fetch limit out of range, a loop over a loop
    or a delay, a delay out of range, a JMESPath that does not compile) is 400
    VALIDATION_ERROR at creation, and no column is made; in range, it is accepted."""
    t = ws.create_table("Cfg", [{"name": "A", "type": "text"}])
    r = ws.api.post(f"/tables/{t['id']}/columns", json=col)
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", r.text
    assert col["name"] + ":" in r.json()["error"]
    assert [c["name"] for c in ws.api.get(f"/tables/{t['id']}").json()["columns"]] == ["A"]
    fine = {"fetch_records": {"table_id": "Cfg", "limit": 100}, "delay": {"seconds": 0},
            "json_parser": {"source_column": "A", "path": "a.b"},
            "loop": {"source_column": "A", "step": {"type": "formula", "config": {"formula": "{item}"}}}}[col["type"]]
    r = ws.api.post(f"/tables/{t['id']}/columns", json={**col, "config": fine})
    assert r.status_code == 201, r.text


def test_a_position_past_the_last_column_is_the_last_and_an_absurd_one_is_refused(ws):
    """A position of 2^31 - 1 was accepted, and every later column of the table then failed
    with "integer out of range" (INTERNAL over MCP)."""
    t = ws.create_table("Pos", [{"name": "A", "type": "text"}])
    cols = f"/tables/{t['id']}/columns"
    for bad in (2147483647, 10_001, -1):
        r = ws.api.post(cols, json={"name": "X", "type": "text", "position": bad})
        assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", (bad, r.text)
    assert ws.api.post(cols, json={"name": "Far", "type": "text", "position": 9999}).status_code == 201
    assert ws.api.post(cols, json={"name": "Next", "type": "text"}).status_code == 201
    assert ws.api.post(cols, json={"name": "First", "type": "text", "position": 0}).status_code == 201
    got = ws.api.get(f"/tables/{t['id']}").json()["columns"]
    assert [(c["name"], c["position"]) for c in got] == [("First", 0), ("A", 1), ("Far", 2), ("Next", 3)]
    far = next(c for c in got if c["name"] == "Far")
    r = ws.api.patch(f"{cols}/{far['id']}", json={"position": 2147483647})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", r.text


@pytest.mark.parametrize(("col", "key"), [
    ({"name": "H", "type": "http_request", "config": {"url": "https://example.com/", "methd": "POST"}}, "methd"),
    ({"name": "F", "type": "formula", "formula": "1", "config": {"lang": "javascript"}}, "lang"),
    ({"name": "J", "type": "json_parser", "config": {"source_column": "A", "path": "a", "default": 0}}, "default"),
    ({"name": "R", "type": "fetch_records", "config": {"table": "Keys", "limit": 5}}, "table"),
    ({"name": "X", "type": "create_record", "config": {"table_id": "Keys", "fields": {}, "upsert": True}}, "upsert"),
    ({"name": "D", "type": "delay", "config": {"second": 5}}, "second"),
    ({"name": "L", "type": "loop", "config": {"source_column": "A", "step": {"type": "formula", "formula": "{item}"}}},
     "formula"),
    ({"name": "L", "type": "loop", "config": {"source_column": "A",
                                              "step": {"type": "formula", "config": {"formula": "{item}", "run_on": ["create"]}}}},
     "run_on"),
])
def test_unknown_config_keys_are_refused_naming_the_key_and_the_allowed_ones(ws, col, key):
    """An http_request config {"methd": "POST"} was stored and the request went out as GET:
    a key the kind does not read did nothing, silently. It is 400 VALIDATION_ERROR naming
    the key and the keys the kind takes, and no column is made."""
    t = ws.create_table("Keys", [{"name": "A", "type": "text"}])
    r = ws.api.post(f"/tables/{t['id']}/columns", json=col)
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", r.text
    assert repr(key) in r.json()["error"] and "allowed:" in r.json()["error"], r.text
    assert [c["name"] for c in ws.api.get(f"/tables/{t['id']}").json()["columns"]] == ["A"]
    # the same on a table's creation
    r = ws.api.post("/tables", json={"name": "Keys2", "columns": [{"name": "A", "type": "text"}, col]})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", r.text
    assert "Keys2" not in [x["name"] for x in ws.api.get("/tables").json()]


def test_a_delay_needs_seconds(ws):
    """delay {} and {"second": 5} were accepted and waited 0 s, while seconds: -1 was refused."""
    t = ws.create_table("Wait", [{"name": "A", "type": "text"}])
    for config in ({}, {"second": 5}, None):
        r = ws.api.post(f"/tables/{t['id']}/columns", json={"name": "D", "type": "delay", "config": config})
        assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", (config, r.text)
        assert "seconds" in r.json()["error"]
    assert ws.api.post(f"/tables/{t['id']}/columns", json={"name": "D", "type": "delay",
                                                           "config": {"seconds": 0}}).status_code == 201


def test_a_stored_config_with_other_keys_still_loads_runs_and_renames(ws, services):
    """Columns stored before unknown keys were refused keep working: they load, run, can be
    renamed or have their formula edited; only a config sent anew is checked key by key."""
    import psycopg
    from psycopg.types.json import Jsonb

    from api.services.cache import CHANNEL

    t = ws.create_table("Old", [{"name": "N", "type": "number"},
                                {"name": "Double", "type": "formula", "formula": "{N} * 2"},
                                {"name": "Wait", "type": "delay", "config": {"seconds": 0}}])
    cols = {c["name"]: c for c in t["columns"]}
    with psycopg.connect(services.pg.dsn, autocommit=True) as conn:
        conn.execute("UPDATE wds.columns SET config = config || %s WHERE id = %s",
                     (Jsonb({"legacy": 1}), cols["Double"]["id"]))
        conn.execute("UPDATE wds.columns SET config = %s WHERE id = %s", (Jsonb({}), cols["Wait"]["id"]))
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"schema:{ws.id}"))
    base = f"/tables/{t['id']}/columns"
    deadline = time.time() + 10
    while ws.api.get(f"{base}/{cols['Double']['id']}").json()["config"].get("legacy") != 1:
        assert time.time() < deadline, "the schema cache never saw the stored config"
        time.sleep(0.05)
    rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"N": 4}})
    assert rec.status_code == 201 and rec.json()["fields"]["Double"] == 8, rec.text
    assert rec.json()["pipeline"]["status"] == "ok", rec.text
    r = ws.api.patch(f"{base}/{cols['Double']['id']}", json={"name": "Twice"})
    assert r.status_code == 200 and r.json()["config"]["legacy"] == 1, r.text
    r = ws.api.patch(f"{base}/{cols['Double']['id']}", json={"formula": "{N} * 3"})
    assert r.status_code == 200, r.text
    assert ws.api.patch(f"{base}/{cols['Wait']['id']}", json={"name": "Pause"}).status_code == 200
    # a config sent anew is checked: the old key must go
    r = ws.api.patch(f"{base}/{cols['Double']['id']}", json={"config": r.json()["config"]})
    assert r.status_code == 400 and "'legacy'" in r.json()["error"], r.text
    r = ws.api.patch(f"{base}/{cols['Double']['id']}", json={"config": {}})
    assert r.status_code == 200 and r.json()["config"] == {}, r.text
    assert ws.api.patch(f"{base}/{cols['Wait']['id']}", json={"config": {}}).status_code == 400
