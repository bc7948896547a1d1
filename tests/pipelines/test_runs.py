"""run, compute and run-actions, with progress; record steps; loops; budgets."""

from __future__ import annotations

import json
import secrets
import time

import httpx
import pytest

from tests.pipelines.test_backfill import wait_run as wait_final


def wait_run(ws, run_id, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = ws.api.get(f"/runs/{run_id}").json()
        if r["status"] == "completed":
            return r
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not complete: {r}")


def test_compute_reruns_exactly_one_column(ws):
    t = ws.create_table("C", [
        {"name": "A", "type": "number"},
        {"name": "B", "type": "formula", "formula": "{A} + 1"},
        {"name": "C", "type": "formula", "formula": "{A} + 2"},
    ])
    rec = ws.api.post(f"/tables/{t['id']}/records?run_pipeline=false", json={"fields": {"A": 1}}).json()
    r = ws.api.post(f"/tables/{t['id']}/records/{rec['id']}/compute/B")
    assert r.status_code == 200, r.text
    assert r.json()["value"] == 2 and r.json()["column"] == "B" and r.json()["record_id"] == rec["id"]
    fields = ws.api.get(f"/tables/{t['id']}/records/{rec['id']}").json()["fields"]
    assert fields["B"] == 2 and fields["C"] is None
    assert ws.api.post(f"/tables/{t['id']}/records/{rec['id']}/compute/A").json()["code"] == "VALIDATION_ERROR"
    c = next(col for col in t["columns"] if col["name"] == "C")
    by_id = ws.api.post(f"/tables/{t['id']}/records/{rec['id']}/compute/{c['id']}")
    assert by_id.status_code == 200 and by_id.json()["column"] == "C" and by_id.json()["value"] == 3, by_id.text
    slash = ws.api.post(f"/tables/{t['id']}/columns", json={"name": "a/b c", "type": "formula", "formula": "{A} * 5"})
    assert slash.status_code == 201, slash.text
    named = ws.api.post(f"/tables/{t['id']}/records/{rec['id']}/compute/a%2Fb%20c")
    assert named.status_code == 200 and named.json()["value"] == 5, named.text
    assert ws.api.post(f"/tables/{t['id']}/records/{rec['id']}/compute/Nope").json()["code"] == "UNKNOWN_COLUMN"


def test_run_as_if_columns_changed(ws):
    t = ws.create_table("C", [
        {"name": "A", "type": "number"}, {"name": "X", "type": "number"},
        {"name": "B", "type": "formula", "formula": "{A} * 10"},
        {"name": "Y", "type": "formula", "formula": "{X} * 10"},
    ])
    rec = ws.api.post(f"/tables/{t['id']}/records?run_pipeline=false", json={"fields": {"A": 1, "X": 2}}).json()
    r = ws.api.post(f"/tables/{t['id']}/records/{rec['id']}/run", json={"mode": "edit", "changed_columns": ["A"]})
    assert r.status_code == 200, r.text
    assert r.json()["record"]["fields"]["B"] == 10 and r.json()["record"]["fields"]["Y"] is None
    r = ws.api.post(f"/tables/{t['id']}/records/{rec['id']}/run", json={"mode": "create"})
    assert r.json()["record"]["fields"]["Y"] == 20 and r.json()["pipeline"]["status"] == "ok"


def test_run_actions_over_filters_reports_progress(ws):
    t = ws.create_table("C", [{"name": "A", "type": "number"}, {"name": "B", "type": "formula", "formula": "{A} * 2"}])
    rows = [{"fields": {"A": i}} for i in range(450)]
    ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows, "run_pipeline": False})
    r = ws.api.post(f"/tables/{t['id']}/run-actions", json={"filters": {"A": "gte.100"}})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["total"] == 350 and body["workflow_id"].startswith("bulk/")
    done = wait_run(ws, body["run_id"])
    assert done["done"] == 350 and done["failed"] == 0
    got = ws.api.get(f"/tables/{t['id']}/records?A=in.(99,100,449)&order=A.asc").json()["records"]
    assert [x["fields"]["B"] for x in got] == [None, 200, 898]


def test_a_run_is_visible_only_to_tokens_that_may_read_its_table(ws):
    """A run's failed rows name records and their errors (cell-derived text): a token
    without read on the run's table gets 404, as for a run that does not exist."""
    t = ws.create_table("Runs", [{"name": "A", "type": "number"},
                                 {"name": "Leak", "type": "formula", "formula": 'ERROR("secret-" & {A})'}])
    ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": [{"fields": {"A": 1}}], "run_pipeline": False})
    run_id = ws.api.post(f"/tables/{t['id']}/run-actions", json={"filters": {}}).json()["run_id"]
    done = wait_final(ws, run_id)  # completed_with_errors is final too
    assert done["failed"] == 1 and "secret-1" in str(done["failed_rows"])
    other = ws.create_table("Other", [{"name": "A", "type": "number"}])
    blind = ws.client(ws.token("rest_api", profile_id=ws.profile([])["id"])["token"])
    elsewhere = ws.client(ws.token("rest_api", profile_id=ws.profile([{"table_id": other["id"], "read": True}])["id"])["token"])
    reader = ws.client(ws.token("rest_api", profile_id=ws.profile([{"table_id": t["id"], "read": True}])["id"])["token"])
    for c in (blind, elsewhere):
        r = c.get(f"/runs/{run_id}")
        assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND" and "secret" not in r.text, r.text
    r = reader.get(f"/runs/{run_id}")
    assert r.status_code == 200 and r.json()["failed"] == 1, r.text


def test_run_actions_over_ids_and_bad_input(ws):
    t = ws.create_table("C", [{"name": "A", "type": "number"}, {"name": "B", "type": "formula", "formula": "{A} + 1"}])
    ids = [ws.api.post(f"/tables/{t['id']}/records?run_pipeline=false", json={"fields": {"A": i}}).json()["id"] for i in range(3)]
    r = ws.api.post(f"/tables/{t['id']}/run-actions", json={"record_ids": ids + [999999]})
    assert r.status_code == 202 and r.json()["total"] == 3
    assert r.json()["missing"] == [999999]  # said, not silently skipped
    wait_run(ws, r.json()["run_id"])
    for bad in ([True], ["1"], [-1], [0], [1.5]):  # lax parsing ran record 1 for true and "1"
        refused = ws.api.post(f"/tables/{t['id']}/run-actions", json={"record_ids": bad})
        assert refused.status_code == 400 and refused.json()["code"] == "VALIDATION_ERROR", (bad, refused.text)
    assert ws.api.post(f"/tables/{t['id']}/run-actions", json={"filters": {"Nope": "eq.1"}}).json()["code"] == "UNKNOWN_COLUMN"
    assert ws.api.post(f"/tables/{t['id']}/run-actions", json={"column_ids": [999]}).json()["code"] == "VALIDATION_ERROR"
    assert ws.api.get("/runs/run-nope").status_code == 404


def test_record_steps_create_update_fetch_and_delete(ws):
    log = ws.create_table("Log", [{"name": "Msg", "type": "text"}, {"name": "Len", "type": "formula", "formula": "LEN({Msg})"}])
    t = ws.create_table("Src", [
        {"name": "Name", "type": "text"},
        {"name": "Logged", "type": "create_record", "config": {"table_id": log["id"], "fields": {"Msg": "hello {{ Name }}"}}},
        {"name": "Found", "type": "fetch_records", "config": {"table_id": log["id"], "filters": {"Msg": "eq.hello {{ Name }}"},
                                                              "depends_on": ["Logged"]}},
    ])
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": "Ann"}})
    assert r.status_code == 201, r.text
    rec = r.json()
    assert rec["pipeline"]["status"] == "ok", rec["pipeline"]
    log_id = rec["fields"]["Logged"]
    created = ws.api.get(f"/tables/{log['id']}/records/{log_id}").json()
    assert created["fields"]["Msg"] == "hello Ann"
    assert created["fields"]["Len"] == 9  # the created record's own pipeline ran (child workflow)
    assert [x["id"] for x in rec["fields"]["Found"]] == [log_id]
    upd = ws.create_table("Upd", [
        {"name": "Target", "type": "number"},
        {"name": "Touch", "type": "update_record", "config": {"table_id": log["id"], "record_id": "{{ Target }}", "fields": {"Msg": "changed"}}},
    ])
    ws.api.post(f"/tables/{upd['id']}/records", json={"fields": {"Target": log_id}})
    assert ws.api.get(f"/tables/{log['id']}/records/{log_id}").json()["fields"]["Len"] == 7
    rm = ws.create_table("Rm", [
        {"name": "Target", "type": "number"},
        {"name": "Gone", "type": "delete_record", "config": {"table_id": log["id"], "record_id": "{{ Target }}"}},
    ])
    out = ws.api.post(f"/tables/{rm['id']}/records", json={"fields": {"Target": log_id}}).json()
    assert out["fields"]["Gone"] == log_id
    assert ws.api.get(f"/tables/{log['id']}/records/{log_id}").status_code == 404


def test_a_delete_record_step_recomputes_what_read_the_cleared_relations(ws):
    """A record deleted by a ``delete_record`` step clears the relation cells pointing at
    it; the records cleared run their pipeline (child workflows) as an update of the
    relation would, so their formulas over it do not keep the old values."""
    owner = ws.create_table("Owner", [{"name": "Name", "type": "text"}])
    child = ws.create_table("Child", [
        {"name": "O", "type": "relation", "relation_table_id": owner["id"]},
        {"name": "HasOwner", "type": "formula", "formula": 'IF({O},"yes","no")'},
    ])
    o = ws.api.post(f"/tables/{owner['id']}/records", json={"fields": {"Name": "a"}}).json()
    kid = ws.api.post(f"/tables/{child['id']}/records", json={"fields": {"O": o["id"]}}).json()
    assert kid["fields"]["HasOwner"] == "yes"
    rm = ws.create_table("Rm", [
        {"name": "Target", "type": "number"},
        {"name": "Gone", "type": "delete_record", "config": {"table_id": owner["id"], "record_id": "{{ Target }}"}},
    ])
    out = ws.api.post(f"/tables/{rm['id']}/records", json={"fields": {"Target": o["id"]}}).json()
    assert out["fields"]["Gone"] == o["id"] and out["pipeline"]["status"] == "ok", out
    got = ws.api.get(f"/tables/{child['id']}/records/{kid['id']}").json()["fields"]
    assert got["O"] is None and got["HasOwner"] == "no", got


def test_record_steps_honour_the_writing_tokens_grants(ws):
    secret = ws.create_table("Secret", [{"name": "Msg", "type": "text"}])
    tok = ws.token("rest_api")
    c = ws.client(tok["token"])
    t = ws.create_table("Mine", [
        {"name": "Name", "type": "text"},
        {"name": "Sneak", "type": "create_record", "config": {"table_id": secret["id"], "fields": {"Msg": "x"}}},
    ], client=c)
    rec = c.post(f"/tables/{t['id']}/records", json={"fields": {"Name": "a"}}).json()
    assert "permission" in rec["pipeline"]["errors"]["Sneak"]
    assert ws.api.get(f"/tables/{secret['id']}/records").json()["records"] == []


def test_steps_cannot_reach_another_workspace(make_workspace):
    a, b = make_workspace(), make_workspace()
    tb = b.create_table("Theirs", [{"name": "Msg", "type": "text"}])
    b.api.post(f"/tables/{tb['id']}/records", json={"fields": {"Msg": "private"}})
    # another workspace's table id is refused when the column is written (issue #21) ...
    for col in ({"name": "Peek", "type": "fetch_records", "config": {"table_id": tb["id"]}},
                {"name": "Poke", "type": "create_record", "config": {"table_id": tb["id"], "fields": {"Msg": "x"}}}):
        r = a.api.post("/tables", json={"name": "Probe", "columns": [{"name": "N", "type": "text"}, col]})
        assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", r.text
        assert "private" not in r.text
    # ... and a step whose target table is gone (deleted with force) does not reach it either
    own = a.create_table("Mine", [{"name": "Msg", "type": "text"}])
    t = a.create_table("Probe", [
        {"name": "N", "type": "text"},
        {"name": "Peek", "type": "fetch_records", "config": {"table_id": own["id"]}},
        {"name": "Poke", "type": "create_record", "config": {"table_id": own["id"], "fields": {"Msg": "x"}}},
    ])
    assert a.api.delete(f"/tables/{own['id']}?force=true").status_code == 200
    rec = a.api.post(f"/tables/{t['id']}/records", json={"fields": {"N": "x"}}).json()
    assert rec["pipeline"]["errors"]["Peek"] and rec["pipeline"]["errors"]["Poke"]
    assert rec["fields"]["Peek"] is None and rec["fields"]["Poke"] is None
    assert len(b.api.get(f"/tables/{tb['id']}/records").json()["records"]) == 1


def test_loop_runs_a_sub_step_per_item(ws):
    t = ws.create_table("L", [
        {"name": "Json", "type": "text"},
        {"name": "Items", "type": "json_parser", "config": {"source_column": "Json", "path": "items"}},
        {"name": "Doubled", "type": "loop", "config": {"source_column": "Items", "step": {"type": "formula", "config": {"formula": "{item} * 2"}}}},
    ])
    rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Json": '{"items": [1, 2, 3]}'}}).json()
    assert rec["fields"]["Items"] == [1, 2, 3]
    assert rec["fields"]["Doubled"] == [2, 4, 6], rec


def test_a_loop_past_the_step_budget_stops_with_budget_exceeded(make_workspace):
    ws = make_workspace(plan="free")  # 25 steps per row
    t = ws.create_table("L", [
        {"name": "Json", "type": "text"},
        {"name": "Items", "type": "json_parser", "config": {"source_column": "Json", "path": "@"}},
        {"name": "Each", "type": "loop", "config": {"source_column": "Items", "step": {"type": "formula", "config": {"formula": "{item}"}}}},
        {"name": "After", "type": "formula", "formula": "LEN({Json})"},
    ])
    rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Json": str(list(range(40)))}}).json()
    assert rec["pipeline"]["errors"]["Each"] == "budget_exceeded"
    assert rec["fields"]["Json"]  # the record itself stays saved


def test_a_loop_over_more_than_1000_items_fails_the_row_instead_of_dropping_items(make_workspace):
    ws = make_workspace(plan="enterprise")  # steps and seconds enough for 1,001 items: only the loop's limit counts
    t = ws.create_table("L", [
        {"name": "Json", "type": "text"},
        {"name": "Items", "type": "json_parser", "config": {"source_column": "Json", "path": "@"}},
        {"name": "Each", "type": "loop", "config": {"source_column": "Items", "step": {"type": "formula", "config": {"formula": "{item} * 2"}}}},
        {"name": "Count", "type": "formula", "formula": "LEN({Json})"},
    ])
    rows = [{"Json": json.dumps(list(range(1001)))}, {"Json": "[1, 2, 3]"}]
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows})
    assert r.status_code == 200, r.text
    long, short = (res["record"] for res in r.json()["results"])
    assert long["pipeline"]["status"] == "error", long["pipeline"]
    assert long["pipeline"]["errors"]["Each"] == "the list has 1,001 items; a loop runs at most 1,000"
    assert long["fields"]["Each"] is None and long["fields"]["Count"] > 0  # never 1,000 results
    assert short["pipeline"]["status"] == "ok" and short["fields"]["Each"] == [2, 4, 6]
    stored = ws.api.get(f"/tables/{t['id']}/records/{long['id']}").json()
    assert stored["fields"]["Each"] is None and stored["pipeline"] == long["pipeline"]


@pytest.mark.slow
def test_a_delay_past_the_free_plans_time_budget_is_budget_exceeded(make_workspace):
    ws = make_workspace(plan="free")  # 10 s per row
    t = ws.create_table("D", [
        {"name": "A", "type": "number"},
        {"name": "Wait", "type": "delay", "config": {"seconds": 30}},
        {"name": "Then", "type": "formula", "formula": "IF({Wait}, {A} + 1, 0)"},
    ])
    started = time.monotonic()
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1}})
    elapsed = time.monotonic() - started
    assert r.status_code == 201, r.text
    rec = r.json()
    assert rec["pipeline"]["errors"]["Wait"] == "budget_exceeded"
    assert "Then" in rec["pipeline"]["errors"]
    assert 9 <= elapsed < 25
    assert ws.api.get(f"/tables/{t['id']}/records/{rec['id']}").json()["fields"]["A"] == 1


def test_a_short_delay_completes(ws):
    t = ws.create_table("D", [{"name": "A", "type": "number"}, {"name": "Wait", "type": "delay", "config": {"seconds": 1}}])
    rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1}}).json()
    assert rec["pipeline"]["status"] == "ok" and rec["fields"]["Wait"]


def test_fetch_records_takes_both_filter_forms_and_a_rename_carries_into_its_groups(ws):
    """Other doors take a filter as an object or a list of {column, op, value}; a
    fetch_records step took only the object, and kept its or/and groups by column name, so
    renaming a target column broke the step (every record's fetch failed). Groups are now
    stored by column id, as views and schedules store theirs."""
    people = ws.create_table("People", [{"name": "Name", "type": "text"}, {"name": "Age", "type": "number"}])
    for name, age in (("ann", 30), ("bob", 40), ("cy", 50)):
        assert ws.api.post(f"/tables/{people['id']}/records", json={"fields": {"Name": name, "Age": age}}).status_code == 201
    t = ws.create_table("Lookup", [
        {"name": "Who", "type": "text"},
        {"name": "Obj", "type": "fetch_records", "config": {
            "table_id": people["id"], "limit": 10, "filters": {"Age": "gt.0", "or": "(Name.eq.{{ Who }},Age.gte.50)"}}},
        {"name": "Lst", "type": "fetch_records", "config": {
            "table_id": people["id"], "limit": 10,
            "filters": [{"column": "Age", "op": "lt", "value": 45}, {"or": "(Name.eq.{{ Who }},Name.eq.bob)"},
                        {"column": "id", "op": "gt", "value": 0}]}},
    ])

    def fetched(who: str, key: str) -> dict[str, list[str]]:
        r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Who": who}})
        assert r.status_code == 201 and r.json()["pipeline"]["status"] == "ok", r.text
        return {c: sorted(x[key] for x in r.json()["fields"][c]) for c in ("Obj", "Lst")}

    assert fetched("ann", "Name") == {"Obj": ["ann", "cy"], "Lst": ["ann", "bob"]}
    cols = {c["name"]: c["id"] for c in people["columns"]}
    for old, new in (("Name", "Full name"), ("Age", "Years")):
        r = ws.api.patch(f"/tables/{people['id']}/columns/{cols[old]}", json={"name": new})
        assert r.status_code == 200, r.text
    shown = {c["name"]: c["config"]["filters"] for c in ws.api.get(f"/tables/{t['id']}/columns").json()
             if c["name"] in ("Obj", "Lst")}
    assert "Full name" in shown["Obj"]["or"] and "Years" in shown["Obj"]["or"], shown["Obj"]
    assert shown["Obj"]["Years"] == "gt.0", shown["Obj"]
    assert shown["Lst"][0]["column"] == "Years" and "Full name" in shown["Lst"][1]["or"], shown["Lst"]
    assert fetched("bob", "Full name") == {"Obj": ["bob", "cy"], "Lst": ["bob"]}
    # a column the groups name cannot be deleted from under them without the caller knowing
    r = ws.api.delete(f"/tables/{people['id']}/columns/{cols['Age']}")
    assert r.status_code == 409, r.text


def test_fetch_records_group_values_render_as_values(ws):
    """A template inside an or/and group was rendered into the group's text: a record
    whose value held ``",`` ended the quoted value and added its own condition (here: the
    whole of People), and a ``"`` or ``,`` made the group unreadable. Each value now
    renders on its own and is quoted as the grammar needs."""
    people = ws.create_table("People", [{"name": "Name", "type": "text"}, {"name": "Age", "type": "number"}])
    names = ("ann", "bob", 'o"neil, jr', "back\\slash", "cy")
    for i, name in enumerate(names):
        r = ws.api.post(f"/tables/{people['id']}/records", json={"fields": {"Name": name, "Age": 10 * (i + 1)}})
        assert r.status_code == 201, r.text
    t = ws.create_table("Finder", [
        {"name": "Who", "type": "text"},
        {"name": "Eq", "type": "fetch_records", "config": {
            "table_id": people["id"], "limit": 10, "filters": {"or": "(Name.eq.{{ Who }},Age.gte.50)"}}},
        {"name": "In", "type": "fetch_records", "config": {
            "table_id": people["id"], "limit": 10,
            "filters": [{"not.and": "(Name.not.in.({{ Who }},ann),Age.lt.100)"}]}},
        {"name": "Fields", "type": "fetch_records", "config": {
            "table_id": people["id"], "limit": 10, "filters": {"or": "(Name.eq.{{ fields['Who'] }})"}}},
    ])

    def fetched(who: str) -> dict[str, list[str]]:
        r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Who": who}})
        body = r.json()
        assert r.status_code == 201 and body["pipeline"]["status"] == "ok", r.text
        return {c: sorted(x["Name"] for x in body["fields"][c]) for c in ("Eq", "In", "Fields")}

    assert fetched("bob") == {"Eq": ["bob", "cy"], "In": ["ann", "bob"], "Fields": ["bob"]}
    assert fetched('o"neil, jr') == {"Eq": ["cy", 'o"neil, jr'], "In": ["ann", 'o"neil, jr'],
                                     "Fields": ['o"neil, jr']}
    assert fetched("back\\slash") == {"Eq": ["back\\slash", "cy"], "In": ["ann", "back\\slash"],
                                      "Fields": ["back\\slash"]}
    # the injection: a value that closes its quote and adds "Name.eq.bob" matches nobody
    hostile = 'x",Name.eq."bob'
    assert fetched(hostile) == {"Eq": ["cy"], "In": ["ann"], "Fields": []}


def test_record_steps_resolve_file_references_as_a_rest_write_does(ws, base_url):
    """A file reference a step writes must name an object of this workspace that the
    writer may read, and reads back as the signed URL a REST write of it gives. Before,
    steps stored the reference unresolved: a missing object was accepted, and a good one
    read back as the token URL."""
    storage = ws.client(ws.builder_token)
    storage.base_url = f"{base_url}/storage/v1"
    assert storage.post("/bucket", json={"name": "vault", "public": False}).status_code in (200, 201)
    assert storage.post("/object/vault/q.pdf", content=b"%PDF-1.4 q",
                        headers={"Content-Type": "application/pdf"}).status_code in (200, 201)
    tok = ws.token("rest_api")
    c = ws.client(tok["token"])  # its tables are its own; the builder's bucket is not granted to it
    for client in (ws.api, c):
        papers = ws.create_table(f"Papers-{secrets.token_hex(2)}", [{"name": "Doc", "type": "file"}], client=client)
        maker = ws.create_table(f"Maker-{secrets.token_hex(2)}", [
            {"name": "Path", "type": "text"},
            {"name": "Made", "type": "create_record",
             "config": {"table_id": papers["id"], "fields": {"Doc": [{"bucket": "vault", "path": "{{ Path }}"}]}}},
        ], client=client)
        missing = client.post(f"/tables/{maker['id']}/records", json={"fields": {"Path": "nope.pdf"}}).json()
        good = client.post(f"/tables/{maker['id']}/records", json={"fields": {"Path": "q.pdf"}}).json()
        if client is c:  # no read grant on the bucket: refused as a REST write by this token is
            assert good["pipeline"]["errors"]["Made"].startswith("FORBIDDEN"), good["pipeline"]
            direct = c.post(f"/tables/{papers['id']}/records", json={"fields": {"Doc": [{"bucket": "vault", "path": "q.pdf"}]}})
            assert direct.status_code == 403 and direct.json()["code"] == "FORBIDDEN", direct.text
            assert ws.api.get(f"/tables/{papers['id']}/records").json()["records"] == []
            continue
        assert missing["pipeline"]["errors"]["Made"].startswith("INVALID_VALUE"), missing["pipeline"]
        assert good["pipeline"]["status"] == "ok", good["pipeline"]
        made = ws.api.get(f"/tables/{papers['id']}/records/{good['fields']['Made']}").json()
        rest = ws.api.post(f"/tables/{papers['id']}/records", json={"fields": {"Doc": [{"bucket": "vault", "path": "q.pdf"}]}})
        assert [r["id"] for r in ws.api.get(f"/tables/{papers['id']}/records").json()["records"]] == \
            [good["fields"]["Made"], rest.json()["id"]]  # the missing object made no record
        for url in (made["fields"]["Doc"][0], rest.json()["fields"]["Doc"][0]):
            assert "/storage/v1/object/sign/" in url, url  # resolved to the bucket's id and signed
            got = httpx.get(url)  # a signed URL needs no token
            assert got.status_code == 200 and got.content == b"%PDF-1.4 q"
