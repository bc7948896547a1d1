"""The 12 data tools over the official MCP client: happy paths, errors, grants per tool,
pipelines on writes, pagination hints and read-only plans."""

from __future__ import annotations

import time

import pytest

from tests.mcp.conftest import data, error_code

COLUMNS = [
    {"name": "Title", "type": "text", "required": True},
    {"name": "Score", "type": "number"},
    {"name": "Status", "type": "single_select", "options": ["todo", "done"]},
    {"name": "Double", "type": "formula", "formula": "{Score} * 2"},
]


@pytest.fixture
def table(ws):
    return ws.create_table("Tasks", COLUMNS)


def seed(ws, table, n):
    rows = [{"fields": {"Title": f"t{i}", "Score": i, "Status": "done" if i % 2 else "todo"}} for i in range(n)]
    r = ws.api.post(f"/tables/{table['id']}/records/batch", json={"rows": rows})
    assert r.status_code == 200, r.text
    return [x["record"] for x in r.json()["results"]]


async def test_check_column_types_lists_data_computed_types_and_formula_functions(ws, mcp):
    async with mcp(ws.builder_token) as c:
        out = data(await c.call_tool("check_column_types", {}))
    assert {t["type"] for t in out["data_types"]} == {"text", "number", "date", "checkbox", "single_select",
                                                     "multi_select", "relation", "file"}
    assert {"formula", "http_request", "json_parser", "loop", "delay"} <= {t["type"] for t in out["computed_types"]}
    assert {"SUM", "IF", "CONCAT"} <= {f["name"] for f in out["formula_functions"]}
    assert isinstance(out["integrations"], list)  # the special-fields catalogue, when installed


async def test_list_tables_and_columns_by_id_or_name(ws, mcp, table):
    async with mcp(ws.builder_token) as c:
        tables = data(await c.call_tool("list_tables", {}))["tables"]
        assert [(t["id"], t["name"], t["columns"]) for t in tables] == [(table["id"], "Tasks", 4)]
        by_id = data(await c.call_tool("list_columns", {"table_id": table["id"]}))
        by_name = data(await c.call_tool("list_columns", {"table_id": "Tasks"}))
        assert by_id == by_name
        assert [col["name"] for col in by_id["columns"]] == ["Title", "Score", "Status", "Double"]
        assert error_code(await c.call_tool("list_columns", {"table_id": "Nope"})) == "NOT_FOUND"


async def test_create_record_runs_the_pipeline_and_returns_computed_values(ws, mcp, table):
    async with mcp(ws.builder_token) as c:
        rec = data(await c.call_tool("create_record", {"table_id": "Tasks",
                                                       "fields": {"Title": "a", "Score": 21, "Status": "todo"}}))
        assert rec["fields"]["Double"] == 42
        assert rec["pipeline"]["status"] == "ok"
        todo = next(o["id"] for o in table["columns"][2]["options"] if o["label"] == "todo")
        assert rec["fields"]["Status"] == todo
        upd = data(await c.call_tool("update_record", {"table_id": table["id"], "record_id": rec["id"],
                                                       "fields": {"Score": 5}}))
        assert upd["fields"]["Double"] == 10 and upd["fields"]["Title"] == "a"
        got = data(await c.call_tool("get_record", {"table_id": "Tasks", "record_id": str(rec["id"])}))
        assert got["fields"] == upd["fields"]
        cell = data(await c.call_tool("compute_cell", {"table_id": "Tasks", "record_id": rec["id"],
                                                       "column": "Double"}))
        assert cell["record_id"] == rec["id"] and cell["column"] == "Double" and cell["value"] == 10
        assert data(await c.call_tool("delete_record", {"table_id": "Tasks", "record_id": rec["id"]})) == {
            "id": rec["id"], "deleted": True}
        assert error_code(await c.call_tool("get_record", {"table_id": "Tasks", "record_id": rec["id"]})) == "NOT_FOUND"
    # the same record is gone for REST too: one engine behind both doors
    assert ws.api.get(f"/tables/{table['id']}/records/{rec['id']}").status_code == 404


@pytest.mark.parametrize("tool,args,code", [
    ("create_record", {"fields": {}}, "REQUIRED_FIELD"),
    ("create_record", {"fields": {"Title": "x", "Nope": 1}}, "UNKNOWN_COLUMN"),
    ("create_record", {"fields": {"Title": "x", "Score": "abc"}}, "INVALID_VALUE"),
    ("create_record", {"fields": {"Title": "x", "Status": "maybe"}}, "INVALID_OPTION"),
    ("create_record", {"fields": {"Title": "x", "Double": 3}}, "READ_ONLY_COLUMN"),
    ("update_record", {"record_id": 999999, "fields": {"Score": 1}}, "NOT_FOUND"),
    ("update_record", {"record_id": "abc", "fields": {"Score": 1}}, "NOT_FOUND"),
    ("delete_record", {"record_id": 999999}, "NOT_FOUND"),
    ("get_record", {"record_id": 999999}, "NOT_FOUND"),
    ("compute_cell", {"record_id": 999999, "column": "Double"}, "NOT_FOUND"),
    ("list_records", {"filters": {"Nope": "eq.1"}}, "UNKNOWN_COLUMN"),
    ("list_records", {"filters": {"Score": "zz.1"}}, "UNKNOWN_OPERATOR"),
    ("list_records", {"order": "Nope.desc"}, "UNKNOWN_COLUMN"),
    ("list_records", {"limit": 1001}, "LIMIT_TOO_LARGE"),
    # integers past 64 bits were INTERNAL (the memo key's encoder refused them); REST's codes
    ("list_records", {"offset": 10**20}, "VALIDATION_ERROR"),
    ("list_records", {"view": 10**20}, "NOT_FOUND"),
    ("semantic_search", {"query": "urgent things"}, "NOT_CONFIGURED"),
])
async def test_data_tool_errors_carry_the_rest_codes(ws, mcp, table, tool, args, code):
    async with mcp(ws.builder_token) as c:
        assert error_code(await c.call_tool(tool, {"table_id": table["id"], **args})) == code


async def test_compute_cell_refuses_data_columns(ws, mcp, table):
    rec = seed(ws, table, 1)[0]
    async with mcp(ws.builder_token) as c:
        res = await c.call_tool("compute_cell", {"table_id": table["id"], "record_id": rec["id"], "column": "Score"})
        assert error_code(res) == "VALIDATION_ERROR"
        res = await c.call_tool("compute_cell", {"table_id": table["id"], "record_id": rec["id"], "column": "Nope"})
        assert error_code(res) == "UNKNOWN_COLUMN"


async def test_list_records_pages_with_metadata_and_a_hint(ws, mcp, table):
    seed(ws, table, 30)
    async with mcp(ws.builder_token) as c:
        default = data(await c.call_tool("list_records", {"table_id": "Tasks"}))
        assert (default["limit"], len(default["records"]), default["has_more"]) == (100, 30, False)  # as REST
        first = data(await c.call_tool("list_records", {"table_id": "Tasks", "order": "Score.asc", "limit": 25.0}))
        # no count asked: has_more comes from one record past the page, and there is no total
        assert (first["limit"], first["offset"], first["has_more"]) == (25, 0, True) and "total" not in first
        assert len(first["records"]) == 25 and "offset=25" in first["hint"]
        assert [r["fields"]["Score"] for r in first["records"]] == list(range(25))
        counted = data(await c.call_tool("list_records", {"table_id": "Tasks", "order": "Score.asc", "count": True,
                                                          "limit": 25}))
        assert (counted["limit"], counted["offset"], counted["total"], counted["has_more"]) == (25, 0, 30, True)
        assert counted["records"] == first["records"] and "5 more record(s)" in counted["hint"]
        rest = data(await c.call_tool("list_records", {"table_id": "Tasks", "order": "Score.asc", "offset": 25}))
        assert [r["fields"]["Score"] for r in rest["records"]] == [25, 26, 27, 28, 29]
        assert rest["has_more"] is False and "hint" not in rest
        exact = data(await c.call_tool("list_records", {"table_id": "Tasks", "order": "Score.asc", "limit": 30}))
        assert len(exact["records"]) == 30 and exact["has_more"] is False and "hint" not in exact
        done = data(await c.call_tool("list_records", {
            "table_id": "Tasks", "filters": {"Status": "eq.done", "Score": "gte.20"},
            "order": ["Score.desc"], "select": "Title,Score", "limit": 3, "count": True}))
        assert done["total"] == 5 and done["has_more"] is True
        assert [r["fields"] for r in done["records"]] == [{"Title": "t29", "Score": 29}, {"Title": "t27", "Score": 27},
                                                          {"Title": "t25", "Score": 25}]
        ranged = data(await c.call_tool("list_records", {
            "table_id": "Tasks", "filters": [{"column": "Score", "op": "gt", "value": 3},
                                             {"column": "Score", "op": "lt", "value": 6}]}))
        assert sorted(r["fields"]["Score"] for r in ranged["records"]) == [4, 5]
        past = data(await c.call_tool("list_records", {"table_id": "Tasks", "offset": 100}))
        assert past["records"] == [] and past["has_more"] is False and "past the last" in past["hint"]
        past = data(await c.call_tool("list_records", {"table_id": "Tasks", "offset": 100, "count": True}))
        assert past["total"] == 30 and "past the last of 30" in past["hint"]
        none = data(await c.call_tool("list_records", {"table_id": "Tasks", "limit": 0}))
        assert none["records"] == [] and none["has_more"] is True and none["limit"] == 0
        bad = await c.call_tool("list_records", {"table_id": "Tasks", "count": "yes"})
        assert error_code(bad) == "VALIDATION_ERROR"


async def test_list_views_and_sql_query(ws, mcp, table):
    seed(ws, table, 3)
    r = ws.api.post(f"/tables/{table['id']}/views", json={"name": "Done", "view_type": "grid",
                                                          "config": {"filters": {"Status": "eq.done"}}})
    assert r.status_code == 201, r.text
    async with mcp(ws.builder_token) as c:
        views = data(await c.call_tool("list_views", {"table_id": "Tasks"}))["views"]
        assert [(v["name"], v["view_type"], v["config"], v["published"]) for v in views] == [
            ("Done", "grid", {"filters": {"Status": "eq.done"}}, None)]
        out = data(await c.call_tool("sql_query", {"query": "SELECT Title FROM Tasks WHERE Score >= 1 ORDER BY Score"}))
        assert [row["Title"] for row in out["rows"]] == ["t1", "t2"]
        assert (out["total"], out["has_more"]) == (2, False)  # the page ends the result
        page = "SELECT Title FROM Tasks ORDER BY Score LIMIT 1"
        out = data(await c.call_tool("sql_query", {"query": page}))
        assert (len(out["rows"]), out["total"], out["has_more"]) == (1, None, True)
        out = data(await c.call_tool("sql_query", {"query": page, "count": True}))
        assert (len(out["rows"]), out["total"], out["has_more"]) == (1, 3, True)
        assert data(await c.call_tool("sql_query", {"query": "SELECT COUNT(*) FROM Tasks"}))["count"] == 3
        assert error_code(await c.call_tool("sql_query", {"query": "DELETE FROM Tasks"})) == "INVALID_SQL"
        # analytics (issue #25): rows with typed columns
        out = data(await c.call_tool("sql_query", {
            "query": "SELECT Score > 1 AS big, COUNT(*) AS n, SUM(Score) AS s FROM Tasks GROUP BY 1 ORDER BY 1",
            "count": True}))
        assert out["rows"] == [{"big": False, "n": 2, "s": 1}, {"big": True, "n": 1, "s": 2}]
        assert out["columns"] == [{"name": "big", "type": "boolean"}, {"name": "n", "type": "number"},
                                  {"name": "s", "type": "number"}]
        assert (out["total"], out["has_more"]) == (2, False)
        assert error_code(await c.call_tool("sql_query", {"query": "SELECT Title, COUNT(*) FROM Tasks"})) \
            == "INVALID_SQL"


async def test_sql_query_refuses_integer_literals_past_pythons_digit_limit(ws, mcp, table):
    """A 5,000-digit literal (int() stops at 4,300 digits) was INTERNAL; it is INVALID_SQL."""
    digits = "1" * 5000
    async with mcp(ws.builder_token) as c:
        for query in (f"SELECT * FROM Tasks LIMIT {digits}", f"SELECT * FROM Tasks WHERE Score = {digits}",
                      f"SELECT Score + {digits} AS x FROM Tasks", f"SELECT Score FROM Tasks ORDER BY {digits}",
                      f"SELECT round(Score, {digits}) AS x FROM Tasks"):
            assert error_code(await c.call_tool("sql_query", {"query": query})) == "INVALID_SQL", query


async def test_semantic_search_on_a_table_without_it_is_a_clear_error(ws, mcp):
    # the happy path over MCP is in tests/semantic (it needs an embeddings provider)
    ws.create_table("Notes", [{"name": "Body", "type": "text"}])
    async with mcp(ws.builder_token) as c:
        res = await c.call_tool("semantic_search", {"table_id": "Notes", "query": "hello"})
    assert error_code(res) == "NOT_CONFIGURED"


async def test_grants_apply_to_every_tool(ws, mcp, table):
    other = ws.create_table("Secret", [{"name": "Name", "type": "text"}])
    rec = seed(ws, table, 1)[0]
    secret = ws.api.post(f"/tables/{other['id']}/records", json={"fields": {"Name": "s"}}).json()
    prof = ws.profile([{"table_id": table["id"], "read": True, "create": False, "update": False, "delete": False}])
    token = ws.token("user_mcp", profile_id=prof["id"])["token"]
    async with mcp(token) as c:
        assert [t["name"] for t in data(await c.call_tool("list_tables", {}))["tables"]] == ["Tasks"]
        assert len(data(await c.call_tool("list_records", {"table_id": "Tasks"}))["records"]) == 1
        assert data(await c.call_tool("get_record", {"table_id": "Tasks", "record_id": rec["id"]}))["id"] == rec["id"]
        t, r = table["id"], rec["id"]
        forbidden = [
            ("create_record", {"table_id": t, "fields": {"Title": "x"}}),
            ("update_record", {"table_id": t, "record_id": r, "fields": {"Score": 1}}),
            ("delete_record", {"table_id": t, "record_id": r}),
            ("compute_cell", {"table_id": t, "record_id": r, "column": "Double"}),
            ("list_columns", {"table_id": "Secret"}),
            ("list_records", {"table_id": "Secret"}),
            ("get_record", {"table_id": "Secret", "record_id": secret["id"]}),
            ("create_record", {"table_id": "Secret", "fields": {"Name": "x"}}),
            ("list_views", {"table_id": "Secret"}),
            ("semantic_search", {"table_id": "Secret", "query": "x"}),
        ]
        for tool, args in forbidden:
            res = await c.call_tool(tool, args)
            assert error_code(res) == "FORBIDDEN", (tool, res.structured_content)
            assert "s" not in str(res.structured_content.get("records", ""))
        res = await c.call_tool("sql_query", {"query": "SELECT * FROM Secret"})
        assert res.is_error and "rows" not in res.structured_content
        # embedding a relation into an unreadable table is refused too
        res = await c.call_tool("list_records", {"table_id": "Tasks", "select": "Title"})
        assert not res.is_error


async def test_read_only_plan_refuses_writes_but_serves_reads(ws, mcp, table, admin):
    rec = seed(ws, table, 1)[0]
    assert admin.patch(f"/workspaces/{ws.id}", json={"read_only": True}).status_code == 200
    async with mcp(ws.builder_token) as c:
        for tool, args in [("create_record", {"fields": {"Title": "x"}}),
                           ("update_record", {"record_id": rec["id"], "fields": {"Score": 2}}),
                           ("delete_record", {"record_id": rec["id"]}),
                           ("compute_cell", {"record_id": rec["id"], "column": "Double"})]:
            assert error_code(await c.call_tool(tool, {"table_id": table["id"], **args})) == "PLAN_READ_ONLY"
        assert error_code(await c.call_tool("create_table", {"name": "New"})) == "PLAN_READ_ONLY"
        assert len(data(await c.call_tool("list_records", {"table_id": table["id"]}))["records"]) == 1


def test_list_form_terms_are_one_term_each_even_with_a_comma_in_the_name(ws, base_url):
    """``{"select": ["x,y"]}`` was cut into the columns ``x`` and ``y`` (UNKNOWN_COLUMN),
    while REST's quoted ``select="x,y"`` and the SDK's ``.select(["x,y"])`` worked."""
    from tests.mcp.conftest import call_tool_sync

    t = ws.create_table("Commas", [{"name": "x,y", "type": "number"}, {"name": "Other", "type": "text"}])
    for n in (2, 3, 1):
        assert ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"x,y": n, "Other": "o"}}).status_code == 201
    got = call_tool_sync(base_url, ws.builder_token, "list_records",
                         {"table_id": t["id"], "select": ["x,y"], "order": ["x,y.desc"]})
    assert [r["fields"] for r in got["records"]] == [{"x,y": 3}, {"x,y": 2}, {"x,y": 1}], got
    rest = ws.api.get(f"/tables/{t['id']}/records", params={"select": '"x,y"', "order": '"x,y".desc'}).json()
    assert [r["fields"] for r in rest["records"]] == [r["fields"] for r in got["records"]]


async def test_list_records_refuses_more_than_200_conditions_at_once(ws, mcp):
    """The hostile-tenant probe: 100,000 conditions (~4 MB, under the MCP body limit) were
    planned on the event loop for 6.6 s. The parser refuses the 201st condition, groups'
    ones included, before reading it (``TOO_MANY_CONDITIONS``); the REST and view doors:
    ``tests/api/test_filter_conditions.py``."""
    t = ws.create_table("Nums", [{"name": "N", "type": "number"}])
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": [{"fields": {"N": i}} for i in range(5)]})
    assert r.status_code == 200, r.text
    base = {"table_id": t["id"]}

    def neq(n: int, start: int = 1000) -> list[dict[str, object]]:
        return [{"column": "N", "op": "neq", "value": i} for i in range(start, start + n)]

    async with mcp(ws.builder_token) as c:
        assert len(data(await c.call_tool("list_records", {**base, "filters": neq(200)}))["records"]) == 5
        assert error_code(await c.call_tool("list_records", {**base, "filters": neq(201)})) == "TOO_MANY_CONDITIONS"
        group = "(" + ",".join(f"N.neq.{i}" for i in range(100_000)) + ")"
        # the list form, the object form's group, and 100,000 list items each a group of one
        for filters in (neq(100_000, 0), {"or": group}, [{"and": f"(N.neq.{i})"} for i in range(100_000)]):
            started = time.monotonic()
            result = await c.call_tool("list_records", {**base, "filters": filters})
            elapsed = time.monotonic() - started
            assert error_code(result) == "TOO_MANY_CONDITIONS"
            assert "at most 200 conditions" in result.content[0].text  # type: ignore[union-attr]
            # the ~4 MB request's transfer and JSON decoding aside, nothing is done per condition
            assert elapsed < 2.5, elapsed


async def test_sql_query_answers_past_the_byte_cap_as_rest_does(ws, mcp):
    """MCP's sql_query runs the same bounded statement as POST /sql (docs/sql.md): 17
    texts of a million characters (17 MB) pass the 16 MiB cap, 16 answer in full."""
    from tests.api.test_sql import _long_texts

    _long_texts(ws, 17)
    rest = ws.api.post("/sql", json={"query": "SELECT T FROM Long ORDER BY T LIMIT 17"})
    assert rest.status_code == 400 and rest.json()["code"] == "RESULT_TOO_LARGE", rest.text[:300]
    async with mcp(ws.builder_token) as c:
        for query in ("SELECT T FROM Long ORDER BY T LIMIT 17", "SELECT lower(T) AS t FROM Long LIMIT 17"):
            res = await c.call_tool("sql_query", {"query": query})
            assert error_code(res) == "RESULT_TOO_LARGE"
            assert res.structured_content["error"] == rest.json()["error"]
        out = data(await c.call_tool("sql_query", {"query": "SELECT T FROM Long ORDER BY T LIMIT 16"}))
        assert [row["T"][:2] for row in out["rows"]] == [chr(97 + i) * 2 for i in range(16)]
        assert all(len(row["T"]) == 1_000_000 for row in out["rows"]) and out["has_more"] is True


async def test_sql_query_refuses_what_one_row_would_copy_past_the_budget_as_rest_does(ws, mcp):
    """``700 × lower(T)`` over a text of a million characters took the database backend
    to 3.4 GB; both doors now refuse it at translation with the same INVALID_SQL naming
    the budget (64) and the count, and answer a query within it."""
    from tests.api.test_sql import SELECT_LOWERS, _long_texts

    _long_texts(ws, 1)
    rest = ws.api.post("/sql", json={"query": SELECT_LOWERS})
    assert rest.status_code == 400 and rest.json()["code"] == "INVALID_SQL", rest.text[:300]
    assert "2800 times per row, more than the 64 allowed" in rest.json()["error"]
    async with mcp(ws.builder_token) as c:
        started = time.monotonic()
        res = await c.call_tool("sql_query", {"query": SELECT_LOWERS})
        assert time.monotonic() - started < 1.0
        assert error_code(res) == "INVALID_SQL"
        assert res.structured_content["error"] == rest.json()["error"]
        out = data(await c.call_tool("sql_query", {"query": "SELECT length(lower(T)) AS n FROM Long"}))
        assert out["rows"] == [{"n": 1_000_000}]
