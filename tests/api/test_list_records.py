"""GET records over HTTP: filters, legacy form, order, paging, select/expand, counts."""

from __future__ import annotations

import pytest


@pytest.fixture
def data(ws):
    people = ws.create_table("People", [{"name": "Name", "type": "text"}, {"name": "Age", "type": "number"}])
    ids = [ws.api.post(f"/tables/{people['id']}/records", json={"fields": {"Name": n, "Age": a}}).json()["id"]
           for n, a in (("Ann", 30), ("Bob", 40))]
    t = ws.create_table("Tasks", [
        {"name": "Title", "type": "text"},
        {"name": "Score", "type": "number"},
        {"name": "Status", "type": "single_select", "options": ["a", "b", "c"]},
        {"name": "Tags", "type": "multi_select", "options": ["x", "y", "z"]},
        {"name": "Done", "type": "checkbox"},
        {"name": "Due", "type": "date"},
        {"name": "Owner", "type": "relation", "relation_table_id": people["id"]},
        {"name": "Odd name. \"q\" ü", "type": "text"},
    ])
    rows = []
    for i in range(30):
        rows.append({"fields": {
            "Title": f"task {i:02d}", "Score": i * 10, "Status": "abc"[i % 3], "Tags": ["x", "y"] if i % 2 else ["z"],
            "Done": i % 4 == 0, "Due": f"2026-01-{i + 1:02d}", "Owner": ids[i % 2], "Odd name. \"q\" ü": f"v{i}",
        }})
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows, "run_pipeline": False})
    assert r.status_code == 200
    return ws, t, people, ids


def titles(resp):
    assert resp.status_code == 200, resp.text
    return [r["fields"]["Title"] for r in resp.json()["records"]]


def test_two_filters_and_together(data):
    ws, t, *_ = data
    got = titles(ws.api.get(f"/tables/{t['id']}/records", params={"Score": "gt.100", "Status": "eq.a"}))
    assert got == ["task 12", "task 15", "task 18", "task 21", "task 24", "task 27"]


def test_select_filters_accept_label_or_option_id(data):
    ws, t, *_ = data
    status = next(c for c in t["columns"] if c["name"] == "Status")
    b_id = next(o["id"] for o in status["options"] if o["label"] == "b")
    by_label = titles(ws.api.get(f"/tables/{t['id']}/records", params={"Status": "eq.b"}))
    by_id = titles(ws.api.get(f"/tables/{t['id']}/records", params={"Status": f"eq.{b_id}"}))
    assert by_label == by_id and len(by_label) == 10


def test_legacy_filter_form_alone_and_mixed(data):
    ws, t, *_ = data
    legacy = titles(ws.api.get(f"/tables/{t['id']}/records", params={"filter[Score][gte]": "250"}))
    assert legacy == ["task 25", "task 26", "task 27", "task 28", "task 29"]
    mixed = titles(ws.api.get(f"/tables/{t['id']}/records", params={"filter[Score][gte]": "250", "Status": "eq.c"}))
    assert mixed == ["task 26", "task 29"]


@pytest.mark.parametrize("params,expected", [
    ({"Title": "like.task 0*"}, 10),
    ({"Title": "ilike.TASK 1%"}, 10),
    ({"Score": "in.(0,10,20)"}, 3),
    ({"Tags": "cs.{x,y}"}, 15),
    ({"Done": "is.true"}, 8),
    ({"Done": "is.false"}, 22),
    ({"Score": "not.gte.50"}, 5),
    ({"Due": "lt.2026-01-05"}, 4),
    ({"Title": "not.in.(task 00,task 01)"}, 28),
    ({"Odd name. \"q\" ü": "eq.v7"}, 1),
])
def test_operators_over_http(data, params, expected):
    ws, t, *_ = data
    r = ws.api.get(f"/tables/{t['id']}/records", params={**params, "limit": "1000"})
    assert len(titles(r)) == expected


@pytest.mark.parametrize("params,code", [
    ({"Nope": "eq.1"}, "UNKNOWN_COLUMN"),
    ({"Score": "near.1"}, "UNKNOWN_OPERATOR"),
    ({"Score": "gt.abc"}, "INVALID_VALUE"),
    ({"Status": "eq.zzz"}, "INVALID_OPTION"),
    ({"Score": "in.(" + ",".join(str(i) for i in range(201)) + ")"}, "TOO_MANY_VALUES"),
    ({"limit": "1001"}, "LIMIT_TOO_LARGE"),
    ({"limit": "-1"}, "VALIDATION_ERROR"),
    ({"order": "Nope.asc"}, "UNKNOWN_COLUMN"),
])
def test_bad_queries_are_400_with_a_code(data, params, code):
    ws, t, *_ = data
    r = ws.api.get(f"/tables/{t['id']}/records", params=params)
    assert r.status_code == 400 and r.json()["code"] == code, r.text


def test_order_by_system_columns_and_sort_alias(data):
    ws, t, *_ = data
    assert titles(ws.api.get(f"/tables/{t['id']}/records", params={"order": "id.desc", "limit": "2"})) == ["task 29", "task 28"]
    assert titles(ws.api.get(f"/tables/{t['id']}/records", params={"order": "created_at.asc", "limit": "1"})) == ["task 00"]
    assert titles(ws.api.get(f"/tables/{t['id']}/records", params={"sort": "-Score", "limit": "1"})) == ["task 29"]
    assert titles(ws.api.get(f"/tables/{t['id']}/records", params={"order": "Status.desc,Score.asc", "limit": "2"})) == ["task 02", "task 05"]


def test_paging_and_exact_counts(data):
    ws, t, *_ = data
    r = ws.api.get(f"/tables/{t['id']}/records", params={"Score": "gte.100", "limit": "5", "offset": "3"},
                   headers={"Prefer": "count=exact"})
    assert titles(r) == ["task 13", "task 14", "task 15", "task 16", "task 17"]
    assert r.headers["X-Total-Count"] == "20" and r.headers["Content-Range"] == "3-7/20"
    assert r.json()["limit"] == 5 and r.json()["offset"] == 3
    past = ws.api.get(f"/tables/{t['id']}/records", params={"offset": "500"}, headers={"Prefer": "count=exact"})
    assert titles(past) == [] and past.headers["X-Total-Count"] == "30" and past.headers["Content-Range"] == "*/30"
    assert "X-Total-Count" not in ws.api.get(f"/tables/{t['id']}/records").headers
    assert len(titles(ws.api.get(f"/tables/{t['id']}/records", params={"limit": "0"}))) == 0
    assert len(titles(ws.api.get(f"/tables/{t['id']}/records"))) == 30


def test_select_and_embedding(data):
    ws, t, people, ids = data
    r = ws.api.get(f"/tables/{t['id']}/records", params={"select": "Title,Score", "limit": "1"})
    assert r.json()["records"][0]["fields"] == {"Title": "task 00", "Score": 0}
    r = ws.api.get(f"/tables/{t['id']}/records", params={"select": "Title,Owner(Name)", "limit": "1"})
    owner = r.json()["records"][0]["fields"]["Owner"]
    assert owner["id"] == ids[0] and owner["fields"] == {"Name": "Ann"}
    r = ws.api.get(f"/tables/{t['id']}/records", params={"expand": "Owner", "limit": "1"})
    assert r.json()["records"][0]["fields"]["Owner"]["fields"] == {"Name": "Ann", "Age": 30}


def test_embedding_needs_read_permission_on_the_related_table(data):
    ws, t, people, _ = data
    prof = ws.profile([{"table_id": t["id"], "read": True}])
    c = ws.client(ws.token("rest_api", profile_id=prof["id"])["token"])
    assert c.get(f"/tables/{t['id']}/records", params={"limit": "1"}).status_code == 200
    for params in ({"expand": "Owner"}, {"select": "Title,Owner(Name)"}):
        r = c.get(f"/tables/{t['id']}/records", params=params)
        assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN"


def test_injection_attempts_are_inert(data):
    ws, t, *_ = data
    evil = "x'); DROP TABLE wds.tables; --"
    assert ws.api.get(f"/tables/{t['id']}/records", params={"Title": f"eq.{evil}"}).json()["records"] == []
    assert ws.api.get(f"/tables/{t['id']}/records", params={evil: "eq.1"}).json()["code"] == "UNKNOWN_COLUMN"
    assert ws.api.get(f"/tables/{t['id']}/records", params={"order": f"{evil}.asc"}).status_code == 400
    assert ws.api.get("/tables").status_code == 200


def test_batch_mixed_rows_keep_input_order(ws):
    t = ws.create_table("B", [{"name": "N", "type": "number", "required": True}])
    rows = [{"fields": {"N": 1}}, {"fields": {"N": "x"}}, {"N": 3}, {"fields": {}}, {"fields": {"N": 5}}]
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows})
    res = r.json()["results"]
    assert [x["index"] for x in res] == [0, 1, 2, 3, 4]
    assert res[0]["record"]["fields"]["N"] == 1 and res[2]["record"]["fields"]["N"] == 3
    assert res[1]["code"] == "INVALID_VALUE" and res[3]["code"] == "REQUIRED_FIELD"
    ids = [res[i]["record"]["id"] for i in (0, 2, 4)]
    assert ids == sorted(ids)


def test_batch_size_limit(ws):
    t = ws.create_table("B", [{"name": "N", "type": "number"}])
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": [{"fields": {"N": i}} for i in range(501)]})
    assert r.status_code == 400 and r.json()["code"] == "BATCH_TOO_LARGE"
    assert ws.api.get(f"/tables/{t['id']}/records").json()["records"] == []
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": [{"fields": {"N": i}} for i in range(500)]})
    assert r.status_code == 200 and len(r.json()["results"]) == 500


def test_batch_isolates_a_row_failing_in_the_database(ws):
    p = ws.create_table("P", [{"name": "Name", "type": "text"}])
    pid = ws.api.post(f"/tables/{p['id']}/records", json={"fields": {"Name": "a"}}).json()["id"]
    t = ws.create_table("B", [{"name": "L", "type": "relation", "relation_table_id": p["id"]}])
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": [{"fields": {"L": pid}}, {"fields": {"L": 999999}}, {"fields": {"L": pid}}]})
    res = r.json()["results"]
    assert "record" in res[0] and res[1]["code"] == "INVALID_VALUE" and "record" in res[2]


AWKWARD = ["it's", "back\\slash \\' \\\\", "100%s %(x)s {}", "$1 ; -- /* */", "ünïcødé ☃ 🦆", "a*b", "E'\\x41'"]


def test_filter_values_reach_the_database_as_values_whatever_they_hold(ws):
    """A list's values are bound into its memoised statement text by psycopg (quoted as
    literals of their type): quotes, backslashes, placeholders, comments and non-ASCII text
    filter as the values they are with eq, in and like, also once psycopg has prepared the
    statement (repeated past its threshold of five), with and without a count."""
    t = ws.create_table("Odd", [{"name": "Title", "type": "text"}, {"name": "N", "type": "number"}])
    r = ws.api.post(f"/tables/{t['id']}/records/batch",
                    json={"rows": [{"fields": {"Title": v, "N": i}} for i, v in enumerate(AWKWARD)]})
    assert r.status_code == 200, r.text
    url = f"/tables/{t['id']}/records"
    for value in AWKWARD:
        for i in range(7):
            resp = ws.api.get(url, params={"Title": f"eq.{value}"}, headers={"Prefer": "count=exact"} if i % 2 else {})
            assert titles(resp) == [value], value
            if i % 2:
                assert resp.headers["x-total-count"] == "1"
        assert titles(ws.api.get(url, params={"Title": [f"eq.{value}"], "N": "gte.0"})) == [value]
    assert titles(ws.api.get(url, params={"Title": "like.*'*", "order": "N.asc"})) == ["it's", AWKWARD[1], AWKWARD[6]]
    assert titles(ws.api.get(url, params={"Title": "like.100%*"})) == [AWKWARD[2]]


def test_a_backslash_makes_a_wildcard_literal_in_like_on_text_and_single_select(ws):
    """``\\*``, ``\\%`` and ``\\\\`` match a literal ``*``, ``%`` and backslash on every
    column kind ``like`` applies to; a backslash before anything else is itself, and ``_``
    is always itself. Single-select labels are matched in Python, text in PostgreSQL: both
    answer alike."""
    values = ["100% off", "100 off", "a*b", "axb", "C:\\temp", "C:\\temp\\x", "a_b", "a\\*b"]
    t = ws.create_table("Esc", [{"name": "Title", "type": "text"},
                                {"name": "Pick", "type": "single_select", "options": values}])
    r = ws.api.post(f"/tables/{t['id']}/records/batch",
                    json={"rows": [{"fields": {"Title": v, "Pick": v}} for v in values]})
    assert r.status_code == 200, r.text
    url = f"/tables/{t['id']}/records"
    cases = [
        ("100\\%*", ["100% off"]), ("100%", ["100% off", "100 off"]), ("a\\*b", ["a*b"]), ("a*b", ["a*b", "axb", "a_b", "a\\*b"]),
        ("C:\\temp", ["C:\\temp"]), ("C:\\temp\\\\*", ["C:\\temp\\x"]), ("a_b", ["a_b"]), ("a\\\\\\*b", ["a\\*b"]),
        ("*\\**", ["a*b", "a\\*b"]),
    ]
    for pattern, expected in cases:
        for column in ("Title", "Pick"):
            for op in ("like", "ilike"):
                got = ws.api.get(url, params={column: f"{op}.{pattern}", "limit": "100"})
                assert sorted(titles(got)) == sorted(expected), (column, op, pattern)


def test_a_single_select_pattern_cannot_stall_the_process(ws):
    """Labels are matched without a backtracking regex: ``*a*a*…*b`` against a long label
    of ``a`` took exponential time (the event loop stalled for minutes)."""
    t = ws.create_table("Stall", [{"name": "Pick", "type": "single_select", "options": ["a" * 200, "b"]}])
    url = f"/tables/{t['id']}/records"
    r = ws.api.get(url, params={"Pick": "like." + "*a" * 40 + "*b"}, timeout=20)
    assert r.status_code == 200 and r.json()["records"] == []


def test_the_empty_set_is_contained_in_every_multi_select_also_a_never_set_one(data):
    """A never-set multi_select (NULL, read as ``[]``) did not match ``cs.{}`` while a
    stored ``[]`` did; ``not.cs.{}`` then returned rows that read ``[]``."""
    ws, t, *_ = data
    url = f"/tables/{t['id']}/records"
    blank = ws.api.post(url, json={"fields": {"Title": "no tags"}}).json()
    cleared = ws.api.post(url, json={"fields": {"Title": "cleared", "Tags": []}}).json()
    assert blank["fields"]["Tags"] == cleared["fields"]["Tags"] == []
    everyone = titles(ws.api.get(url, params={"Tags": "cs.{}", "limit": "1000"}))
    assert len(everyone) == 32 and {"no tags", "cleared"} <= set(everyone)
    assert titles(ws.api.get(url, params={"Tags": "not.cs.{}", "limit": "1000"})) == []
    assert titles(ws.api.get(url, params={"Tags": "in.()", "limit": "1000"})) == []
    assert len(titles(ws.api.get(url, params={"Tags": "cs.{z}", "limit": "1000"}))) == 15
