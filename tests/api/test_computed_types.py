"""Computed columns' value types over REST (issue #24 item 1): shown as ``result_type``,
declared with ``config.result_type`` (checked), re-typed and re-indexed with the formula
edit that changes them, and results that do not fit the type are the record's error."""

from __future__ import annotations

import os

import psycopg
import pytest

from storage import ddl
from tests.pipelines.test_backfill import wait_run

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")


def _indexes(ws_id: int, table_id: int, column_id: int) -> dict[str, str]:
    with psycopg.connect(DSN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND indexname LIKE %s",
            (f"ws_{ws_id}", f"t_{table_id}_c_{column_id}%"),
        ).fetchall()
    return {name: definition for name, definition in rows}


def test_result_type_is_declared_checked_and_shown(ws):
    t = ws.create_table("Types", [{"name": "A", "type": "number"}])
    url = f"/tables/{t['id']}/columns"
    r = ws.api.post(url, json={"name": "Js", "type": "formula", "formula": "return 1",
                               "config": {"language": "javascript"}})
    assert r.status_code == 201, r.text
    assert r.json()["result_type"] == "json"
    r = ws.api.post(url, json={"name": "Num", "type": "formula", "formula": "return {A}",
                               "config": {"language": "javascript", "result_type": "number"}})
    assert r.status_code == 201 and r.json()["result_type"] == "number", r.text
    assert set(_indexes(ws.id, t["id"], r.json()["id"])) == {f"t_{t['id']}_c_{r.json()['id']}"}
    for bad in ("integer", 5, None):
        r = ws.api.post(url, json={"name": "Bad", "type": "formula", "formula": "1",
                                   "config": {"result_type": bad}})
        assert r.status_code == 400 and r.json()["code"] == "INVALID_RESULT_TYPE", r.text
    r = ws.api.post(url, json={"name": "Bad", "type": "text", "config": {"result_type": "text"}})
    assert r.status_code == 400, r.text
    assert [c["name"] for c in ws.api.get(url).json()] == ["A", "Js", "Num"]  # nothing made on failure
    listed = {c["name"]: c.get("result_type") for c in ws.api.get(url).json()}
    assert listed == {"A": None, "Js": "json", "Num": "number"}


def test_a_formula_edit_that_changes_the_type_reindexes_in_the_same_change(ws):
    t = ws.create_table("Edit", [{"name": "A", "type": "number"},
                                 {"name": "F", "type": "formula", "formula": "{A} * 2"}])
    f = next(c for c in t["columns"] if c["name"] == "F")
    assert f["result_type"] == "number"
    rows = [{"fields": {"A": i}} for i in range(6)]
    assert ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows}).status_code == 200
    got = ws.api.get(f"/tables/{t['id']}/records", params={"F": "gte.6", "order": "F.desc"}).json()["records"]
    assert [r["fields"]["F"] for r in got] == [10, 8, 6]
    btree = f"t_{t['id']}_c_{f['id']}"
    assert "'number'" in _indexes(ws.id, t["id"], f["id"])[btree]
    r = ws.api.patch(f"/tables/{t['id']}/columns/{f['id']}", json={"formula": '"n" & {A}'})
    assert r.status_code == 200 and r.json()["result_type"] == "text", r.text
    indexes = _indexes(ws.id, t["id"], f["id"])
    assert set(indexes) == {btree, ddl.trigram_index_name(t["id"], f["id"])}
    assert "'number'" not in indexes[btree] and "'string'" in indexes[btree] and "left" in indexes[btree]
    assert wait_run(ws, r.json()["backfill"]["run_id"])["status"] == "completed"
    got = ws.api.get(f"/tables/{t['id']}/records", params={"F": "ilike.N*", "order": "F.desc"}).json()["records"]
    assert [r["fields"]["F"] for r in got] == ["n5", "n4", "n3", "n2", "n1", "n0"]
    bad = ws.api.get(f"/tables/{t['id']}/records", params={"F": "is.true"})
    assert bad.status_code == 400, bad.text
    # to json: no index of its own, JSON filter semantics again
    r = ws.api.patch(f"/tables/{t['id']}/columns/{f['id']}", json={"formula": 'SPLIT("n,m", ",")'})
    assert r.status_code == 200 and r.json()["result_type"] == "json", r.text
    assert _indexes(ws.id, t["id"], f["id"]) == {}


def test_a_result_that_does_not_fit_is_kept_and_is_the_records_error(ws):
    t = ws.create_table("Fit", [
        {"name": "A", "type": "text"},
        {"name": "N", "type": "formula", "formula": "return {A}",
         "config": {"language": "javascript", "result_type": "number"}},
    ])
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": "seven"}})
    assert r.status_code == 201, r.text
    rec = r.json()
    assert rec["fields"]["N"] == "seven"  # never silently dropped
    assert rec["pipeline"]["status"] == "error"
    assert rec["pipeline"]["errors"]["N"].startswith("VALUE_TYPE_MISMATCH"), rec["pipeline"]
    ok = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": "7"}}).json()
    assert ok["pipeline"]["status"] == "error"  # "7" is text, not a number
    # a value of another type reads as blank to sorts and filters
    got = ws.api.get(f"/tables/{t['id']}/records", params={"N": "is.null"}).json()["records"]
    assert {r["id"] for r in got} == {rec["id"], ok["id"]}


@pytest.mark.parametrize("formula, value, query", [
    ("{A} > 2", True, {"F": "is.true"}),
    ("{A} > 2", True, {"F": "eq.true"}),
    ('DATEADD("2024-01-01T00:00:00+00:00", {A}, "days")', "2024-01-04T00:00:00+00:00", {"F": "gte.2024-01-04"}),
])
def test_boolean_and_date_formulas_filter_like_data_columns(ws, formula, value, query):
    t = ws.create_table("BD", [{"name": "A", "type": "number"}, {"name": "F", "type": "formula", "formula": formula}])
    rows = [{"fields": {"A": i}} for i in range(5)]
    assert ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows}).status_code == 200
    got = ws.api.get(f"/tables/{t['id']}/records", params={**query, "order": "A.asc"}).json()["records"]
    assert [r["fields"]["A"] for r in got] == [3, 4]
    assert got[0]["fields"]["F"] == value


def test_formulas_reading_a_retyped_column_follow_its_type(ws):
    t = ws.create_table("Follow", [
        {"name": "A", "type": "number"},
        {"name": "F", "type": "formula", "formula": "{A}"},
        {"name": "G", "type": "formula", "formula": "IF({F}, {F})"},
        {"name": "D", "type": "formula", "formula": "{A}", "config": {"result_type": "json"}},
    ])
    cols = {c["name"]: c for c in t["columns"]}
    assert [cols[n]["result_type"] for n in "FGD"] == ["number", "number", "json"]
    r = ws.api.patch(f"/tables/{t['id']}/columns/{cols['A']['id']}", json={"type": "text"})
    assert r.status_code == 200, r.text
    listed = {c["name"]: c.get("result_type") for c in ws.api.get(f"/tables/{t['id']}/columns").json()}
    assert listed == {"A": None, "F": "text", "G": "text", "D": "json"}
    for n in "FG":
        assert "'string'" in _indexes(ws.id, t["id"], cols[n]["id"])[f"t_{t['id']}_c_{cols[n]['id']}"]


def test_a_formula_reading_a_later_column_of_a_new_table_gets_its_type(ws):
    t = ws.create_table("Order", [
        {"name": "Early", "type": "formula", "formula": "{Late}"},
        {"name": "Late", "type": "formula", "formula": "{A} * 2"},
        {"name": "A", "type": "number"},
    ])
    assert {c["name"]: c.get("result_type") for c in t["columns"]} == {"Early": "number", "Late": "number", "A": None}


def test_long_text_results_are_written_sorted_and_paged(ws):
    import secrets

    t = ws.create_table("Long", [{"name": "A", "type": "text"},
                                 {"name": "F", "type": "formula", "formula": '"same prefix " & {A} & {A} & {A}'}])
    # results of random text far over a btree entry's ~2.7 kB, sharing their first 200
    # characters (A itself stays under it: a data text column's btree holds it whole)
    head = "x" * 200
    rows = [{"fields": {"A": head + secrets.token_hex(900)}} for _ in range(7)]
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows})
    assert r.status_code == 200, r.text
    assert r.json()["pipeline"]["status"] == "ok", r.json()["pipeline"]
    seen: list[int] = []
    params = {"order": "F.asc", "limit": "3", "select": "A"}
    while True:
        page = ws.api.get(f"/tables/{t['id']}/records", params=params).json()
        seen.extend(x["id"] for x in page["records"])
        if not page["next"]:
            break
        params = {**params, "after": page["next"]}
    assert seen == sorted(seen) and len(seen) == 7  # equal prefixes: by id
    one = ws.api.get(f"/tables/{t['id']}/records/{seen[3]}").json()["fields"]["F"]
    got = ws.api.get(f"/tables/{t['id']}/records", params={"F": f"eq.{one}", "select": ""}).json()["records"]
    assert [x["id"] for x in got] == [seen[3]]
    got = ws.api.get(f"/tables/{t['id']}/records", params={"F": f"gt.{one}", "select": ""}).json()["records"]
    assert sorted(x["id"] for x in got) == sorted(
        i for i in seen if ws.api.get(f"/tables/{t['id']}/records/{i}").json()["fields"]["F"] > one)


def test_a_huge_computed_number_reads_as_a_number_not_hundreds_of_digits(ws):
    """jsonb keeps a computed number as ``numeric``, whose text has no exponent: 1e301 was
    answered as a 302-digit integer on every read (the data column beside it: 1e+300)."""
    import re

    t = ws.create_table("Huge", [{"name": "A", "type": "number"},
                                 {"name": "F", "type": "formula", "formula": "{A} * 10"},
                                 {"name": "Frac", "type": "formula", "formula": "{A} / 3"}])
    url = f"/tables/{t['id']}/records"
    made = ws.api.post(url, json={"fields": {"A": 1e300}})
    assert made.status_code == 201, made.text
    rid = made.json()["id"]
    answers = [made, ws.api.get(f"{url}/{rid}"), ws.api.get(url), ws.api.get(url, params={"select": "F,Frac"}),
               ws.api.get(url, params={"F": "gt.1e200"})]
    for r in answers:
        assert r.status_code == 200 or r.status_code == 201, r.text
        assert not re.search(r"\d{25}", r.text), r.text[:400]
        body = r.json()
        fields = (body["records"][0] if "records" in body else body)["fields"]
        assert fields["F"] == 1e301 and fields["Frac"] == 1e300 / 3, fields
