"""Records: create, get, patch, delete, and value rules for every type."""

from __future__ import annotations

import time

import orjson
import pytest

from storage import jsontext

COLUMNS = [
    {"name": "Title", "type": "text", "required": True},
    {"name": "Score", "type": "number"},
    {"name": "Due", "type": "date"},
    {"name": "Done", "type": "checkbox"},
    {"name": "Status", "type": "single_select", "options": ["todo", "doing", "done"]},
    {"name": "Tags", "type": "multi_select", "options": ["red", "blue"]},
    {"name": "Files", "type": "file"},
]


@pytest.fixture
def table(ws):
    return ws.create_table("Tasks", COLUMNS)


def opt(table, col, label):
    c = next(c for c in table["columns"] if c["name"] == col)
    return next(o["id"] for o in c["options"] if o["label"] == label)


def test_create_and_get_record_with_every_type(ws, table):
    body = {"fields": {"Title": "A", "Score": 2.5, "Due": "2026-01-05", "Done": True, "Status": "doing",
                       "Tags": ["red", opt(table, "Tags", "blue")], "Files": ["https://example.com/a.png"]}}
    r = ws.api.post(f"/tables/{table['id']}/records", json=body)
    assert r.status_code == 201, r.text
    rec = r.json()
    assert set(rec) >= {"id", "fields", "created_at", "updated_at"}
    f = rec["fields"]
    assert f["Title"] == "A" and f["Score"] == 2.5 and f["Done"] is True
    assert f["Due"].startswith("2026-01-05T00:00:00")
    assert f["Status"] == opt(table, "Status", "doing")
    assert f["Tags"] == [opt(table, "Tags", "red"), opt(table, "Tags", "blue")]
    assert f["Files"] == ["https://example.com/a.png"]
    assert ws.api.get(f"/tables/{table['id']}/records/{rec['id']}").json()["fields"] == f


def test_row_data_is_accepted_as_an_alias_of_fields(ws, table):
    r = ws.api.post(f"/tables/{table['id']}/records", json={"row_data": {"Title": "via row_data"}})
    assert r.status_code == 201 and r.json()["fields"]["Title"] == "via row_data"


def test_unset_values_read_as_empty(ws, table):
    rec = ws.api.post(f"/tables/{table['id']}/records", json={"fields": {"Title": "x"}}).json()
    f = rec["fields"]
    assert f["Score"] is None and f["Due"] is None and f["Done"] is False
    assert f["Status"] is None and f["Tags"] == [] and f["Files"] == []


def test_integral_numbers_come_back_as_integers(ws, table):
    rec = ws.api.post(f"/tables/{table['id']}/records", json={"fields": {"Title": "x", "Score": 3}}).json()
    assert rec["fields"]["Score"] == 3 and isinstance(rec["fields"]["Score"], int)


def test_datetime_with_offset_is_kept_as_an_instant(ws, table):
    rec = ws.api.post(f"/tables/{table['id']}/records", json={"fields": {"Title": "x", "Due": "2026-03-01T10:00:00+02:00"}}).json()
    assert rec["fields"]["Due"].startswith("2026-03-01T08:00:00")


@pytest.mark.parametrize("fields,code", [
    ({}, "REQUIRED_FIELD"),
    ({"Title": ""}, "REQUIRED_FIELD"),
    ({"Title": None}, "REQUIRED_FIELD"),
    ({"Title": "x", "Nope": 1}, "UNKNOWN_COLUMN"),
    ({"Title": "x", "Score": "abc"}, "INVALID_VALUE"),
    ({"Title": "x", "Score": True}, "INVALID_VALUE"),
    ({"Title": "x", "Due": "yesterday"}, "INVALID_VALUE"),
    ({"Title": "x", "Done": "maybe"}, "INVALID_VALUE"),
    ({"Title": "x", "Status": "unknown"}, "INVALID_OPTION"),
    ({"Title": "x", "Tags": ["red", "green"]}, "INVALID_OPTION"),
    ({"Title": "x", "Files": ["not a url"]}, "INVALID_VALUE"),
    ({"Title": {"nested": 1}}, "INVALID_VALUE"),
    ({"Title": "x\u0000y"}, "INVALID_VALUE"),
])
def test_bad_values_are_refused_and_nothing_is_written(ws, table, fields, code):
    r = ws.api.post(f"/tables/{table['id']}/records", json={"fields": fields})
    assert r.status_code == 400, r.text
    assert r.json()["code"] == code
    assert ws.api.get(f"/tables/{table['id']}/records").json()["records"] == []


def test_patch_changes_only_sent_fields_and_advances_updated_at(ws, table):
    rec = ws.api.post(f"/tables/{table['id']}/records", json={"fields": {"Title": "a", "Score": 1}}).json()
    time.sleep(0.01)
    r = ws.api.patch(f"/tables/{table['id']}/records/{rec['id']}", json={"fields": {"Score": 2}})
    assert r.status_code == 200
    new = r.json()
    assert new["fields"]["Title"] == "a" and new["fields"]["Score"] == 2
    assert new["updated_at"] > rec["updated_at"] and new["created_at"] == rec["created_at"]


def test_patch_cannot_clear_a_required_column(ws, table):
    rec = ws.api.post(f"/tables/{table['id']}/records", json={"fields": {"Title": "a"}}).json()
    r = ws.api.patch(f"/tables/{table['id']}/records/{rec['id']}", json={"fields": {"Title": None}})
    assert r.status_code == 400 and r.json()["code"] == "REQUIRED_FIELD"


def test_delete_record(ws, table):
    rec = ws.api.post(f"/tables/{table['id']}/records", json={"fields": {"Title": "a"}}).json()
    r = ws.api.delete(f"/tables/{table['id']}/records/{rec['id']}")
    assert r.status_code == 200 and r.json() == {"id": rec["id"], "deleted": True}
    assert ws.api.get(f"/tables/{table['id']}/records/{rec['id']}").status_code == 404
    assert ws.api.delete(f"/tables/{table['id']}/records/{rec['id']}").status_code == 404


@pytest.mark.parametrize("rid", ["999999", "abc", "-1", "1.5", "99999999999999999999999"])
def test_unknown_or_malformed_record_ids_are_404(ws, table, rid):
    for method in ("GET", "PATCH", "DELETE"):
        r = ws.api.request(method, f"/tables/{table['id']}/records/{rid}",
                           json={"fields": {"Score": 1}} if method == "PATCH" else None)
        assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND", (method, rid, r.text)


def test_relation_returns_the_related_id_and_checks_it_exists(ws):
    people = ws.create_table("People", [{"name": "Name", "type": "text"}])
    tasks = ws.create_table("Jobs", [{"name": "Owner", "type": "relation", "relation_table_id": people["id"]}])
    p = ws.api.post(f"/tables/{people['id']}/records", json={"fields": {"Name": "Ann"}}).json()
    r = ws.api.post(f"/tables/{tasks['id']}/records", json={"fields": {"Owner": p["id"]}})
    assert r.status_code == 201 and r.json()["fields"]["Owner"] == p["id"]
    bad = ws.api.post(f"/tables/{tasks['id']}/records", json={"fields": {"Owner": 987654}})
    assert bad.status_code == 400 and bad.json()["code"] == "INVALID_VALUE"
    # deleting the related record clears the link
    ws.api.delete(f"/tables/{people['id']}/records/{p['id']}")
    assert ws.api.get(f"/tables/{tasks['id']}/records/{r.json()['id']}").json()["fields"]["Owner"] is None


def test_file_cells_accept_bucket_references_and_return_urls(ws, base_url):
    storage = ws.client(ws.builder_token)
    storage.base_url = f"{base_url}/storage/v1"
    assert storage.post("/bucket", json={"name": "docs", "public": True}).status_code in (200, 201)
    assert storage.post("/object/docs/a/b.pdf", content=b"%PDF-1.4 x", headers={"Content-Type": "application/pdf"}).status_code in (200, 201)
    t = ws.create_table("F", [{"name": "Doc", "type": "file"}])
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Doc": [{"bucket": "docs", "path": "a/b.pdf"}]}})
    assert r.status_code == 201, r.text
    url = r.json()["fields"]["Doc"][0]
    assert url.startswith("http") and url.endswith("/a/b.pdf")
    got = storage.get(url.replace(f"{base_url}/storage/v1", ""))
    assert got.status_code == 200 and got.content == b"%PDF-1.4 x"
    missing = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Doc": [{"bucket": "docs", "path": "nope.pdf"}]}})
    assert missing.status_code == 400 and missing.json()["code"] == "INVALID_VALUE"


def test_computed_columns_refuse_client_writes(ws):
    t = ws.create_table("F", [{"name": "A", "type": "number"}, {"name": "B", "type": "formula", "formula": "{A} * 2"}])
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1, "B": 5}})
    assert r.status_code == 400 and r.json()["code"] == "READ_ONLY_COLUMN"


def test_a_plain_batch_answers_each_record_exactly_as_a_read_does(ws):
    """Plain batches (nothing runs after the insert) are answered with records rendered by
    PostgreSQL; every answer must equal what a GET of the record returns, types included."""
    people = ws.create_table("BPeople", [{"name": "Name", "type": "text"}])
    pid = ws.api.post(f"/tables/{people['id']}/records", json={"fields": {"Name": "Ada"}}).json()["id"]
    t = ws.create_table("BAll", [
        {"name": "Title", "type": "text"}, {"name": "Score", "type": "number"}, {"name": "Done", "type": "checkbox"},
        {"name": "Status", "type": "single_select", "options": ["todo", "done"]},
        {"name": "Tags", "type": "multi_select", "options": ["red", "blue"]}, {"name": "Due", "type": "date"},
        {"name": "Owner", "type": "relation", "relation_table_id": people["id"]},
        {"name": "Calc", "type": "formula", "formula": "{Score} * 2"},
    ])
    rows = [
        {"fields": {"Title": "a", "Score": 3, "Done": True, "Status": "todo", "Tags": ["red", "blue"],
                    "Due": "2026-01-02T10:00:00.120Z", "Owner": pid}},
        {"fields": {"Title": "b", "Score": 2.5}},
        {"fields": {"Nope": 1}},  # refused before the insert
        {"Title": "plain object of fields", "Score": -7},
        {"fields": {}},
    ]
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows, "run_pipeline": False})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x.get("code") for x in results] == [None, None, "UNKNOWN_COLUMN", None, None]
    assert [x["index"] for x in results] == [0, 1, 2, 3, 4]
    ids = [x["record"]["id"] for x in results if "record" in x]
    assert ids == sorted(ids)
    for x in results:
        if "record" in x:
            got = ws.api.get(f"/tables/{t['id']}/records/{x['record']['id']}")
            assert x["record"] == got.json()
            assert list(x["record"]["fields"]) == list(got.json()["fields"])  # column order
            for name, value in got.json()["fields"].items():  # 3 stays 3, not 3.0
                assert type(x["record"]["fields"][name]) is type(value), name
    # a row the database refuses (relation to a missing record) is isolated as before
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": [
        {"fields": {"Title": "ok"}}, {"fields": {"Title": "bad", "Owner": 999999999}}], "run_pipeline": False})
    assert r.status_code == 200
    assert "record" in r.json()["results"][0] and r.json()["results"][1]["code"] == "INVALID_VALUE"


def test_a_plain_batch_writes_each_record_with_the_bytes_of_a_read(ws):
    """Without computed columns a plain batch's records are compact JSON text from
    PostgreSQL, sent unparsed: each must be byte for byte the body a GET of the record
    gives (orjson's output), for awkward names and values too. A number that PostgreSQL
    writes in exponent form (an integral value from 2^53 up, or below 1e-4) may be spelled
    differently (``9.007199254740992e+15``, ``1.5e-07``): the same number, as the list
    pages write it."""
    t = ws.create_table("BBytes", [
        {"name": 'Ti"t\\le ✓', "type": "text"}, {"name": "Score", "type": "number"},
        {"name": "Done", "type": "checkbox"}, {"name": "Tags", "type": "multi_select", "options": ["a,b", 'q"']},
        {"name": "Due", "type": "date"},
    ])
    texts = ['he said "hi"\\', "line\nbreak\ttab\u2028\u2029", "😀 ünïcödé \u001e\u001f", "", "{\"id\" : 1}"]
    spelled_alike = [0, -0.0, 3, -3, 2.5, 0.1, 1e20, -1e300, 2**53 - 1, 123456789.125, 0.000123, 1e14 + 0.5]
    exponent_form = [2**53, 2**53 + 2, -(2**53) - 2, 1.5e-7]
    rows = [{"fields": {'Ti"t\\le ✓': texts[i % len(texts)], "Score": n, "Done": i % 3 == 0 or None,
                        "Tags": [["a,b"], ['q"', "a,b"], []][i % 3], "Due": "2026-01-02T10:00:00.120+02:00"}}
            for i, n in enumerate(spelled_alike + exponent_form)]
    rows.append({"fields": {}})
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows, "run_pipeline": False})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert all("record" in x for x in results), results
    for i, x in enumerate(results):
        got = ws.api.get(f"/tables/{t['id']}/records/{x['record']['id']}")
        assert got.status_code == 200
        assert x["record"] == got.json()
        if not len(spelled_alike) <= i < len(spelled_alike) + len(exponent_form):
            assert got.content in r.content, (got.content, r.content)


def test_a_computed_batch_writes_each_record_with_the_bytes_of_a_read(ws):
    """A batch whose formulas and parsers are computed before its INSERT answers each
    record as PostgreSQL renders it, compacted only where jsonb's text is not orjson's (an
    object or array, a fractional number, a record with its own outcome): each must be
    byte for byte the body a GET gives, its ``pipeline`` included (status, run_id, errors)."""
    t = ws.create_table("CBytes", [
        {"name": "T", "type": "text"}, {"name": "N", "type": "number"}, {"name": "Json", "type": "text"},
        {"name": "Num", "type": "formula", "formula": "{N} * 1"},
        {"name": 'Tx"t ✓', "type": "formula", "formula": '{T} & ""'},
        {"name": "Big", "type": "formula", "formula": "{N} > 1"},
        {"name": "Parts", "type": "formula", "formula": 'SPLIT({T}, ",")'},
        {"name": "Inv", "type": "formula", "formula": "1 / {N}"},
        {"name": "Parsed", "type": "json_parser", "config": {"source_column": "Json", "path": "@"}},
    ])
    texts = ['he said "hi"\\', "line\nbreak\ttab\u2028,\u2029", "😀 ünïcödé \u001e\u001f", "", "a , b"]
    exponent_form = [1.5e-7, 2**53 + 2]  # a data column's number PostgreSQL writes in exponent form
    numbers = [0, 3, -3, 2.5, 0.1, 1e20, -1e300, 2**53 - 1, 123456789.125, 0.000123, 1e14 + 0.5, *exponent_form]
    docs = ['{"a" : [1, 2.50, {"b": null}]}', "[1e-7, 1e20]", "7", '"x"', "true", "not json"]
    rows = [{"fields": {"T": texts[i % len(texts)], "N": n, "Json": docs[i % len(docs)]}}
            for i, n in enumerate(numbers)]
    rows.append({"fields": {}})
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["pipeline"]["status"] == "error"  # 1 / 0, and a doc that is not JSON
    results = body["results"]
    assert all("record" in x for x in results), results
    assert {x["record"]["pipeline"]["status"] for x in results} == {"ok", "error"}
    for x in results:
        got = ws.api.get(f"/tables/{t['id']}/records/{x['record']['id']}")
        assert got.status_code == 200
        assert x["record"] == got.json()  # with its pipeline outcome, as the write shows it
        assert got.content in r.content, (got.content, r.content)
    # the list pages render the same bytes: every record (a page compacted, for its arrays),
    # and a selection whose values jsonb writes as orjson does (a page sent as PostgreSQL
    # wrote it) beside one with fractions and objects in it (compacted)
    reads = {x["record"]["id"]: ws.api.get(f"/tables/{t['id']}/records/{x['record']['id']}").json()
             for x in results}
    for select in ("*", "T,N,Big", "Num,Parsed,Inv"):
        page = ws.api.get(f"/tables/{t['id']}/records", params={"select": select, "limit": 100})
        assert page.status_code == 200, page.text
        for listed in page.json()["records"]:
            want = {k: v for k, v in reads[listed["id"]].items() if k != "pipeline"}
            want["fields"] = {k: v for k, v in want["fields"].items() if k in listed["fields"]}
            assert listed == want
            if listed["fields"].get("N") not in exponent_form:  # as for a plain table (test above)
                assert jsontext.dumps(listed) in page.content, (listed, page.content)
    plain = ws.api.get(f"/tables/{t['id']}/records", params={"select": "T,Num", "N": "in.(0,3,-3)"})
    assert [x["fields"]["Num"] for x in plain.json()["records"]] == [0, 3, -3]
    assert all(jsontext.dumps(x) in plain.content for x in plain.json()["records"])


def test_unknown_query_parameters_of_writes_are_refused_and_nothing_is_written(ws):
    """POST …/records?run_pipline=false (a typo) was ignored: the record was written and its
    pipeline ran. Every record write refuses a query parameter it does not take
    (UNKNOWN_PARAMETER) or one given twice (REPEATED_PARAMETER), before anything is written;
    ``run_pipeline`` works where it is documented (create, update; a batch takes it in its body)."""
    t = ws.create_table("Q", [{"name": "N", "type": "number"},
                              {"name": "Double", "type": "formula", "formula": "{N} * 2"}])
    base = f"/tables/{t['id']}/records"
    rec = ws.api.post(f"{base}?run_pipeline=false", json={"fields": {"N": 1}})
    assert rec.status_code == 201 and rec.json()["fields"]["Double"] is None, rec.text
    rid = rec.json()["id"]

    def refused(r, code="UNKNOWN_PARAMETER", word="run_pipline"):
        assert r.status_code == 400 and r.json()["code"] == code, r.text
        assert word in r.json()["error"], r.text

    refused(ws.api.post(f"{base}?run_pipline=false", json={"fields": {"N": 2}}))
    refused(ws.api.post(f"{base}?run_pipeline=false&run_pipeline=true", json={"fields": {"N": 2}}),
            "REPEATED_PARAMETER", "run_pipeline")
    refused(ws.api.patch(f"{base}/{rid}?run_pipline=false", json={"fields": {"N": 3}}))
    refused(ws.api.delete(f"{base}/{rid}?run_pipline=false"))
    refused(ws.api.delete(f"{base}/{rid}?force=true"), word="force")
    refused(ws.api.post(f"{base}/batch?run_pipline=false", json={"rows": [{"N": 4}]}))
    r = ws.api.post(f"{base}/batch?run_pipeline=false", json={"rows": [{"N": 4}]})
    refused(r, word="run_pipeline")
    assert "body" in r.json()["error"]
    # nothing was written: one record, as created
    records = ws.api.get(base).json()["records"]
    assert [(x["id"], x["fields"]) for x in records] == [(rid, {"N": 1, "Double": None})]
    # the documented forms still work
    r = ws.api.patch(f"{base}/{rid}?run_pipeline=true", json={"fields": {"N": 5}})
    assert r.status_code == 200 and r.json()["fields"]["Double"] == 10, r.text
    assert ws.api.delete(f"{base}/{rid}").status_code == 200
