"""The record pipeline end to end through REST, on the real Temporal dev server."""

from __future__ import annotations

import pytest


def test_formula_chain_runs_on_create_and_edit(ws):
    t = ws.create_table("P", [
        {"name": "Price", "type": "number"},
        {"name": "Qty", "type": "number"},
        {"name": "Total", "type": "formula", "formula": "{Price} * {Qty}"},
        {"name": "WithTax", "type": "formula", "formula": "ROUND({Total} * 1.2, 2)"},
        {"name": "Label", "type": "formula", "formula": "\"T=\" & {WithTax}"},
    ])
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Price": 2.5, "Qty": 4}})
    assert r.status_code == 201, r.text
    rec = r.json()
    assert rec["fields"]["Total"] == 10 and rec["fields"]["WithTax"] == 12 and rec["fields"]["Label"] == "T=12"
    assert rec["pipeline"]["status"] == "ok" and rec["pipeline"]["run_id"].startswith("pipeline/")
    r = ws.api.patch(f"/tables/{t['id']}/records/{rec['id']}", json={"fields": {"Qty": 1}})
    assert r.json()["fields"]["Total"] == 2.5 and r.json()["fields"]["Label"] == "T=3"
    got = ws.api.get(f"/tables/{t['id']}/records/{rec['id']}").json()
    assert got["fields"]["Label"] == "T=3" and got["pipeline"]["status"] == "ok"


def test_run_pipeline_false_skips_computed_columns(ws):
    t = ws.create_table("P", [{"name": "A", "type": "number"}, {"name": "B", "type": "formula", "formula": "{A}+1"}])
    r = ws.api.post(f"/tables/{t['id']}/records?run_pipeline=false", json={"fields": {"A": 1}})
    assert r.status_code == 201 and r.json()["fields"]["B"] is None and "pipeline" not in r.json()


def test_a_failing_step_stores_its_error_and_skips_dependants(ws):
    t = ws.create_table("P", [
        {"name": "A", "type": "number"},
        {"name": "Inv", "type": "formula", "formula": "1 / {A}"},
        {"name": "Next", "type": "formula", "formula": "{Inv} + 1"},
        {"name": "Other", "type": "formula", "formula": "{A} + 5"},
    ])
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 0}})
    assert r.status_code == 201
    rec = r.json()
    assert rec["pipeline"]["status"] == "error"
    assert "Inv" in rec["pipeline"]["errors"] and "Next" in rec["pipeline"]["errors"]
    assert rec["fields"]["Other"] == 5 and rec["fields"]["Inv"] is None


def test_cycles_are_refused(ws):
    t = ws.create_table("P", [{"name": "A", "type": "formula", "formula": "1"}, {"name": "B", "type": "formula", "formula": "{A}"}])
    a = t["columns"][0]["id"]
    r = ws.api.patch(f"/tables/{t['id']}/columns/{a}", json={"formula": "{B} + 1"})
    assert r.status_code == 400 and r.json()["code"] == "CIRCULAR_REFERENCE" and "cycle" in r.json()["error"]


def test_batch_runs_one_pipeline_for_all_rows(ws):
    t = ws.create_table("P", [{"name": "A", "type": "number"}, {"name": "B", "type": "formula", "formula": "{A} * 3"}])
    rows = [{"fields": {"A": i}} for i in range(50)] + [{"fields": {"A": "bad"}}]
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows, "run_pipeline": True})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [x["record"]["fields"]["B"] for x in res[:50]] == [i * 3 for i in range(50)]
    assert res[50]["code"] == "INVALID_VALUE"
    assert r.json()["pipeline"]["status"] == "ok" and len(r.json()["pipeline"]["run_ids"]) == 1


def test_batch_answer_equals_what_a_read_returns(ws):
    """A batch's answer is built from the rows its run wrote (api/services/pipelines.py,
    activities/written.py), not read again: it must be exactly what a read returns —
    JSON types (3 vs 3.0), floats, object key order as jsonb keeps it, outcomes — both
    when every value reads back predictably and when one does not (1e17, 1e-07)."""
    import json

    t = ws.create_table("Echo", [
        {"name": "A", "type": "number"},
        {"name": "Json", "type": "text"},
        {"name": "Third", "type": "formula", "formula": "{A} / 3"},
        {"name": "Inv", "type": "formula", "formula": "1 / {A}"},
        {"name": "Obj", "type": "json_parser", "config": {"source_column": "Json", "path": "@"}},
    ])
    plain = '{"zz": 1, "a": {"bb": 0.1, "b": [1, 2.5, "\u00e9", null, true]}, "k": "x"}'
    odd = '{"big": 1e17, "tiny": 1e-7, "n": 1234567890123456789}'
    for docs in ([plain] * 3, [plain, odd]):
        rows = [{"fields": {"A": i, "Json": doc}} for i, doc in enumerate(docs)]
        r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["pipeline"]["status"] == "error"  # 1 / 0 in the first row
        for res in body["results"]:
            rec = res["record"]
            got = ws.api.get(f"/tables/{t['id']}/records/{rec['id']}").json()
            assert json.dumps(rec["fields"]) == json.dumps(got["fields"])  # types and key order too
            assert rec["updated_at"] == got["updated_at"] and rec["created_at"] == got["created_at"]
            assert rec["pipeline"] == got["pipeline"]
        first = body["results"][0]["record"]
        assert first["pipeline"]["status"] == "error" and "Inv" in first["pipeline"]["errors"]
        assert body["results"][1]["record"]["fields"]["Third"] == 1 / 3


def test_integers_beyond_64_bits_are_answered_exactly_by_every_read(ws, base_url):
    """jsonb keeps 1e20 as the integer 100000000000000000000; orjson alone refuses integers
    beyond 64 bits, which used to turn every read of such a record into a 500. A computed
    number is a double, written in a shortest form as a number column's (3e+20), never as
    the 21 digits jsonb keeps."""
    from tests.mcp.conftest import call_tool_sync

    t = ws.create_table("Big", [
        {"name": "A", "type": "number"},
        {"name": "Huge", "type": "formula", "formula": "{A} * 100000000000000000000"},
    ])
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 3}})
    assert r.status_code == 201, r.text
    assert r.json()["fields"]["Huge"] == 3 * 10**20 and b"300000000000000000000" not in r.content, r.text
    rid = r.json()["id"]
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": [{"fields": {"A": 1}}]})
    assert r.status_code == 200 and r.json()["results"][0]["record"]["fields"]["Huge"] == 10**20, r.text
    got = ws.api.get(f"/tables/{t['id']}/records/{rid}")
    assert got.status_code == 200 and got.json()["fields"]["Huge"] == 3 * 10**20
    listed = ws.api.get(f"/tables/{t['id']}/records", params={"order": "id.asc"})
    assert listed.status_code == 200 and listed.json()["records"][0]["fields"]["Huge"] == 3 * 10**20
    expanded = ws.api.get(f"/tables/{t['id']}/records", params={"Huge": "gt.1", "select": "A,Huge"})
    assert expanded.status_code == 200, expanded.text
    sql = ws.api.post("/sql", json={"query": "SELECT Huge FROM Big ORDER BY id"})
    assert sql.status_code == 200 and sql.json()["rows"][0]["Huge"] == 3 * 10**20
    data = call_tool_sync(base_url, ws.builder_token, "get_record", {"table_id": t["id"], "record_id": rid})
    assert data["fields"]["Huge"] == 3 * 10**20


def test_a_result_postgresql_cannot_store_is_that_records_error_not_the_writes(ws):
    """A formula can make text no UTF-8 column holds: a NUL ("\\u0000") or an unpaired
    surrogate (a JavaScript "\\ud800"). Such a result broke the whole write (500 on a
    create, a refused batch, an edit whose run failed and lost every other value); now it
    is that column's error for that record, and the rest of the pipeline goes on."""
    from storage.schema import UNSTORABLE_TEXT

    t = ws.create_table("Odd", [
        {"name": "S", "type": "text"},
        {"name": "Good", "type": "formula", "formula": '{S} & "!"'},
        {"name": "Nul", "type": "formula", "formula": '{S} & "\\u0000"'},
        {"name": "Lone", "type": "formula", "formula": 'fields.S === "ok" ? "fine" : fields.S + "\\ud800"',
         "config": {"language": "javascript"}},
        {"name": "After", "type": "formula", "formula": '{Nul} & "x"'},
    ])
    tid = t["id"]

    def check(record: dict, s: str) -> None:
        fields, pipeline = record["fields"], record["pipeline"]
        assert fields["S"] == s and fields["Good"] == s + "!" and fields["Nul"] is None, record
        assert pipeline["status"] == "error" and pipeline["errors"]["Nul"] == UNSTORABLE_TEXT, record
        assert pipeline["errors"]["After"].startswith("skipped"), record
        if s == "ok":
            assert fields["Lone"] == "fine" and "Lone" not in pipeline["errors"], record
        else:
            assert fields["Lone"] is None and pipeline["errors"]["Lone"] == UNSTORABLE_TEXT, record

    r = ws.api.post(f"/tables/{tid}/records", json={"fields": {"S": "hello"}})
    assert r.status_code == 201, r.text
    check(r.json(), "hello")
    rid = r.json()["id"]
    r = ws.api.post(f"/tables/{tid}/records/batch", json={"rows": [{"fields": {"S": "a"}}, {"fields": {"S": "ok"}}]})
    assert r.status_code == 200, r.text
    for result, s in zip(r.json()["results"], ["a", "ok"], strict=True):
        check(result["record"], s)
    r = ws.api.patch(f"/tables/{tid}/records/{rid}", json={"fields": {"S": "ok"}})
    assert r.status_code == 200, r.text
    check(r.json(), "ok")
    check(ws.api.get(f"/tables/{tid}/records/{rid}").json(), "ok")


async def test_a_waiting_write_hands_its_committed_rows_to_the_run():
    """activities/written.py: the rows a write committed go with its wait to the run, which
    reads its records from them (RecordIO._load) instead of the database; forgetting the
    run drops them, and a run with no rows handed over reads the database."""
    from activities import written

    rows = [{"id": 5, "c_1": 3}, {"id": 6, "c_1": 4}]
    fut = written.expect("run-a", rows)
    try:
        assert written.given_rows("run-a") is rows and written.waiting("run-a")
        assert written.given_rows("run-b") is None
        written.expect("run-b")  # no rows: the run reads the database
        assert written.given_rows("run-b") is None and written.waiting("run-b")
        written.notify("run-a", rows[:1])
        assert await fut == rows[:1]
    finally:
        written.forget("run-a")
        written.forget("run-b")
    assert written.given_rows("run-a") is None and not written.waiting("run-a")


def test_values_the_database_refuses_fail_the_write_step_with_a_clean_non_retryable_reason(ws, services):
    """write_results refused by PostgreSQL (a value it cannot store that got past the
    ledger) fails for good, saying why in one line: psycopg's text carries DETAIL and
    CONTEXT lines that quote the statement's parameters (cell values) into the run's errors."""
    import asyncio

    from temporalio.exceptions import ApplicationError

    from activities.records_io import RecordIO
    from activities.snap import table_snap
    from activities.types import WriteInput
    from storage import meta
    from storage.db import Database

    t = ws.create_table("Refused", [{"name": "A", "type": "text"},
                                    {"name": "B", "type": "formula", "formula": '{A} & "!"'}])
    rid = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": "secret-cell"}}).json()["id"]
    b_id = next(c["id"] for c in t["columns"] if c["name"] == "B")

    async def go() -> ApplicationError:
        db = Database(services.pg.dsn, min_size=1, max_size=2)
        await db.open()
        try:
            async with db.connection() as conn:
                table = (await meta.load_schema(conn, workspace_id=ws.id)).tables[t["id"]]
            update = {"id": rid, "values": {str(b_id): "secret-cell\x00!"},
                      "outcome": {"status": "ok", "run_id": "run-x", "errors": {}}}
            with pytest.raises(ApplicationError) as info:
                await RecordIO(db).write_results(WriteInput(table=table_snap(table), updates=[update]))
            return info.value
        finally:
            await db.close()

    err = asyncio.run(go())
    assert err.non_retryable and err.type == "UNSTORABLE"
    assert err.message.startswith("the computed values could not be stored:") and "\n" not in err.message
    assert "secret-cell" not in err.message and "$1" not in err.message
    got = ws.api.get(f"/tables/{t['id']}/records/{rid}").json()
    assert got["fields"]["B"] == "secret-cell!"  # the stored value is untouched


def test_an_edit_whose_step_fails_leaves_no_stale_value(ws):
    """A column that fails on an edit, and the columns it skips, were left holding the
    values computed from the record's earlier inputs, next to an error saying they were not
    computed: now they are null, as on a create."""
    t = ws.create_table("Stale", [{"name": "N", "type": "text"},
                                  {"name": "Dbl", "type": "formula", "formula": "VALUE({N}) * 2"},
                                  {"name": "Quad", "type": "formula", "formula": "{Dbl} * 2"},
                                  {"name": "Echo", "type": "formula", "formula": '{N} & "!"'}])
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"N": "2"}})
    assert r.status_code == 201 and r.json()["fields"] == {"N": "2", "Dbl": 4, "Quad": 8, "Echo": "2!"}, r.text
    rid = r.json()["id"]
    r = ws.api.patch(f"/tables/{t['id']}/records/{rid}", json={"fields": {"N": "abc"}})
    assert r.status_code == 200, r.text
    for got in (r.json(), ws.api.get(f"/tables/{t['id']}/records/{rid}").json()):
        assert got["fields"] == {"N": "abc", "Dbl": None, "Quad": None, "Echo": "abc!"}, got
        assert got["pipeline"]["status"] == "error" and set(got["pipeline"]["errors"]) == {"Dbl", "Quad"}
    listed = ws.api.get(f"/tables/{t['id']}/records", params={"Dbl": "is.null"}).json()["records"]
    assert [x["id"] for x in listed] == [rid]  # the typed, indexed copy is null too
    r = ws.api.patch(f"/tables/{t['id']}/records/{rid}", json={"fields": {"N": "5"}})
    assert r.json()["fields"] == {"N": "5", "Dbl": 10, "Quad": 20, "Echo": "5!"} and r.json()["pipeline"]["status"] == "ok"


def test_a_run_whose_table_lost_a_column_meanwhile_reads_and_writes_what_is_left(ws, services):
    """A run's table snapshot is taken when it starts: a column deleted while it runs made
    every load and write of the run fail ("column c_35 does not exist", with a HINT quoting
    the SQL), so a backfill racing an unrelated delete failed all its rows."""
    import asyncio

    from activities.records_io import RecordIO
    from activities.snap import table_snap
    from activities.types import LoadInput, WriteInput
    from storage import meta
    from storage.db import Database

    t = ws.create_table("Race", [{"name": "A", "type": "number"}, {"name": "Gone", "type": "text"},
                                 {"name": "Twice", "type": "formula", "formula": "{A} * 2"}])
    rid = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 4, "Gone": "x"}}).json()["id"]
    ids = {c["name"]: c["id"] for c in t["columns"]}

    async def snapshot() -> tuple[Database, object]:
        db = Database(services.pg.dsn, min_size=1, max_size=2)
        await db.open()
        async with db.connection() as conn:
            return db, table_snap((await meta.load_schema(conn, workspace_id=ws.id)).tables[t["id"]])

    async def go() -> tuple[dict, int]:
        db, snap = await snapshot()  # taken before the delete, as a run's is
        try:
            assert ws.api.delete(f"/tables/{t['id']}/columns/{ids['Gone']}").status_code == 200
            io = RecordIO(db)
            fields = await io.load_records(LoadInput(table=snap, record_ids=[rid]))
            update = {"id": rid, "values": {str(ids["Twice"]): 99, str(ids["Gone"]): "y"},
                      "outcome": {"status": "ok", "run_id": "run-race", "errors": {}}}
            written = await io.write_results(WriteInput(table=snap, updates=[update]))
            return fields, written
        finally:
            await db.close()

    fields, written = asyncio.run(go())
    assert fields[str(rid)]["A"] == 4 and "Gone" not in fields[str(rid)]
    assert written == 1
    got = ws.api.get(f"/tables/{t['id']}/records/{rid}").json()
    assert got["fields"] == {"A": 4, "Twice": 99}, got


def test_deleting_a_related_record_recomputes_what_reads_the_cleared_relation(ws):
    """Deleting a record clears the relation cells pointing at it (ON DELETE SET NULL), but
    the computed columns reading those relations kept their old values
    (``{"O": null, "HasOwner": "yes", "OID": 1}``). The cleared records now run their
    pipeline as an update of the relation column would: they read exactly as records
    whose relation was cleared by hand."""
    owner = ws.create_table("Owner", [{"name": "Name", "type": "text"}])
    child = ws.create_table("Child", [
        {"name": "N", "type": "number"},
        {"name": "O", "type": "relation", "relation_table_id": owner["id"]},
        {"name": "HasOwner", "type": "formula", "formula": 'IF({O},"yes","no")'},
        {"name": "OID", "type": "formula", "formula": "{O}*1"},
        {"name": "NN", "type": "formula", "formula": "{N}*2"},
    ])
    o1, o2 = (ws.api.post(f"/tables/{owner['id']}/records", json={"fields": {"Name": n}}).json() for n in "ab")
    records = f"/tables/{child['id']}/records"
    linked = [ws.api.post(records, json={"fields": {"N": i, "O": o1["id"]}}).json() for i in (1, 2)]
    other = ws.api.post(records, json={"fields": {"N": 3, "O": o2["id"]}}).json()
    control = ws.api.post(records, json={"fields": {"N": 4, "O": o2["id"]}}).json()
    assert linked[0]["fields"]["HasOwner"] == "yes" and linked[0]["fields"]["OID"] == o1["id"]
    cleared = ws.api.patch(f"{records}/{control['id']}", json={"fields": {"O": None}}).json()["fields"]
    assert cleared["HasOwner"] == "no"

    r = ws.api.delete(f"/tables/{owner['id']}/records/{o1['id']}")
    assert r.status_code == 200 and r.json() == {"id": o1["id"], "deleted": True}, r.text
    for before in linked:
        got = ws.api.get(f"{records}/{before['id']}").json()
        assert got["fields"]["O"] is None
        assert got["fields"]["HasOwner"] == cleared["HasOwner"] and got["fields"]["OID"] == cleared["OID"], got
        assert got["fields"]["NN"] == before["fields"]["NN"]
        assert got["pipeline"]["status"] == "ok" and got["pipeline"]["run_id"] != before["pipeline"]["run_id"]
    untouched = ws.api.get(f"{records}/{other['id']}").json()
    assert untouched["fields"]["O"] == o2["id"] and untouched["fields"]["HasOwner"] == "yes"
    assert untouched["pipeline"]["run_id"] == other["pipeline"]["run_id"]
    # a record no relation with a computed reader points at is deleted as before
    assert ws.api.delete(f"/tables/{child['id']}/records/{other['id']}").json() == {"id": other["id"], "deleted": True}
    assert ws.api.delete(f"/tables/{owner['id']}/records/{o1['id']}").status_code == 404
