"""Saved views: CRUD per view type, config validation, permissions, and ``?view=`` on listings."""

from __future__ import annotations

import pytest

COLUMNS = [
    {"name": "Title", "type": "text", "required": True},
    {"name": "Score", "type": "number"},
    {"name": "Due", "type": "date"},
    {"name": "Ends", "type": "date"},
    {"name": "Done", "type": "checkbox"},
    {"name": "Status", "type": "single_select", "options": ["todo", "doing", "done"]},
    {"name": "Tags", "type": "multi_select", "options": ["red", "blue"]},
    {"name": "Cover", "type": "file"},
    {"name": "Double", "type": "formula", "formula": "{Score} * 2"},
]


@pytest.fixture
def table(ws):
    return ws.create_table("Tasks", COLUMNS)


def views_url(table):
    return f"/tables/{table['id']}/views"


def create(ws, table, body, client=None):
    return (client or ws.api).post(views_url(table), json=body)


VALID = [
    ("grid", {}),
    ("grid", {"filters": {"Score": "gte.2", "Status": "eq.todo"}, "sort": "Score.desc,Title.asc",
              "hidden_columns": ["Cover"], "column_order": ["Title", "Score"]}),
    ("grid", {"filters": {"Done": True, "Title": None, "Status": ["todo", "done"], "created_at": "gt.2020-01-01"}}),
    ("kanban", {"group_by": "Status", "sort": "Score.asc"}),
    ("gallery", {"cover_column": "Cover", "hidden_columns": ["Score"]}),
    ("gallery", {}),
    ("calendar", {"date_column": "Due", "filters": {"Done": "is.false"}}),
    ("calendar", {"date_column": "created_at"}),
    ("timeline", {"start_column": "Due", "end_column": "Ends"}),
    ("timeline", {"start_column": "Due"}),
    ("form", {"fields": ["Title", "Score", "Status"], "title": "New task", "description": "Tell us",
              "submit_label": "Send"}),
    ("custom", {"anything": [1, {"nested": True}], "theme": "dark"}),
]


@pytest.mark.parametrize("view_type,config", VALID)
def test_create_view_of_every_type_returns_it(ws, table, view_type, config):
    r = create(ws, table, {"name": f"My {view_type}", "view_type": view_type, "config": config})
    assert r.status_code == 201, r.text
    v = r.json()
    assert set(v) == {"id", "table_id", "name", "view_type", "config", "created_at", "updated_at"}
    assert v["table_id"] == table["id"] and v["name"] == f"My {view_type}" and v["view_type"] == view_type
    assert v["config"] == config
    assert ws.api.get(f"{views_url(table)}/{v['id']}").json() == v


def test_config_defaults_to_an_empty_object(ws, table):
    r = create(ws, table, {"name": "Plain", "view_type": "grid"})
    assert r.status_code == 201 and r.json()["config"] == {}


INVALID = [
    # shape
    ({"name": "", "view_type": "grid"}, 400, "VALIDATION_ERROR"),
    ({"name": "x" * 256, "view_type": "grid"}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "table"}, 400, "VALIDATION_ERROR"),
    ({"name": "V"}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "grid", "config": []}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "grid", "extra": 1}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "grid", "config": {"colour": "red"}}, 400, "VALIDATION_ERROR"),
    # filters and sort: the shared grammar and the REST planner's codes
    ({"name": "V", "view_type": "grid", "config": {"filters": {"Nope": "eq.1"}}}, 400, "UNKNOWN_COLUMN"),
    ({"name": "V", "view_type": "grid", "config": {"filters": {"Score": "about.1"}}}, 400, "UNKNOWN_OPERATOR"),
    ({"name": "V", "view_type": "grid", "config": {"filters": {"Score": "gt.abc"}}}, 400, "INVALID_VALUE"),
    ({"name": "V", "view_type": "grid", "config": {"filters": {"Status": "eq.maybe"}}}, 400, "INVALID_OPTION"),
    ({"name": "V", "view_type": "grid", "config": {"filters": {"Cover": "eq.x"}}}, 400, "UNKNOWN_OPERATOR"),
    ({"name": "V", "view_type": "grid", "config": {"filters": ["Score", "gt.1"]}}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "grid", "config": {"sort": "Nope.asc"}}, 400, "UNKNOWN_COLUMN"),
    ({"name": "V", "view_type": "grid", "config": {"sort": ["Score"]}}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "grid", "config": {"sort": "\"Score\".sideways"}}, 400, "VALIDATION_ERROR"),
    # hidden / ordered columns
    ({"name": "V", "view_type": "grid", "config": {"hidden_columns": ["Nope"]}}, 400, "UNKNOWN_COLUMN"),
    ({"name": "V", "view_type": "grid", "config": {"hidden_columns": "Score"}}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "grid", "config": {"column_order": ["Title", "Title"]}}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "grid", "config": {"column_order": ["Title", 3]}}, 400, "VALIDATION_ERROR"),
    # kanban
    ({"name": "V", "view_type": "kanban", "config": {}}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "kanban", "config": {"group_by": "Tags"}}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "kanban", "config": {"group_by": "Title"}}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "kanban", "config": {"group_by": "Nope"}}, 400, "UNKNOWN_COLUMN"),
    # gallery
    ({"name": "V", "view_type": "gallery", "config": {"cover_column": "Title"}}, 400, "VALIDATION_ERROR"),
    # calendar / timeline
    ({"name": "V", "view_type": "calendar", "config": {}}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "calendar", "config": {"date_column": "Score"}}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "calendar", "config": {"date_column": "Double"}}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "calendar", "config": {"group_by": "Status", "date_column": "Due"}}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "timeline", "config": {"end_column": "Ends"}}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "timeline", "config": {"start_column": "Due", "end_column": "Title"}}, 400, "VALIDATION_ERROR"),
    # form
    ({"name": "V", "view_type": "form", "config": {}}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "form", "config": {"fields": []}}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "form", "config": {"fields": ["Title", "Double"]}}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "form", "config": {"fields": ["Score"]}}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "form", "config": {"fields": ["Title", "Nope"]}}, 400, "UNKNOWN_COLUMN"),
    ({"name": "V", "view_type": "form", "config": {"fields": ["Title"], "filters": {}}}, 400, "VALIDATION_ERROR"),
    ({"name": "V", "view_type": "form", "config": {"fields": ["Title"], "title": 5}}, 400, "VALIDATION_ERROR"),
    # custom: any object up to 64 KB
    ({"name": "V", "view_type": "custom", "config": {"blob": "x" * (64 * 1024)}}, 413, "PAYLOAD_TOO_LARGE"),
]


@pytest.mark.parametrize("body,status,code", INVALID)
def test_bad_view_is_refused_and_nothing_is_created(ws, table, body, status, code):
    r = create(ws, table, body)
    assert r.status_code == status, r.text
    assert r.json()["code"] == code
    assert ws.api.get(views_url(table)).json() == []


def test_list_views_of_a_table_only(ws, table):
    other = ws.create_table("Other", [{"name": "Name", "type": "text"}])
    a = create(ws, table, {"name": "A", "view_type": "grid"}).json()
    b = create(ws, table, {"name": "B", "view_type": "kanban", "config": {"group_by": "Status"}}).json()
    create(ws, other, {"name": "A", "view_type": "grid"})
    r = ws.api.get(views_url(table))
    assert r.status_code == 200
    assert [v["id"] for v in r.json()] == [a["id"], b["id"]]
    # a view is addressed through its own table only
    assert ws.api.get(f"{views_url(other)}/{a['id']}").status_code == 404


def test_view_names_are_unique_per_table(ws, table):
    assert create(ws, table, {"name": "Mine", "view_type": "grid"}).status_code == 201
    r = create(ws, table, {"name": "Mine", "view_type": "gallery"})
    assert r.status_code == 409 and r.json()["code"] == "CONFLICT"


def test_patch_renames_and_revalidates_config(ws, table):
    v = create(ws, table, {"name": "Board", "view_type": "kanban", "config": {"group_by": "Status"}}).json()
    url = f"{views_url(table)}/{v['id']}"
    r = ws.api.patch(url, json={"name": "Renamed"})
    assert r.status_code == 200 and r.json()["name"] == "Renamed" and r.json()["config"] == {"group_by": "Status"}
    assert r.json()["updated_at"] >= v["updated_at"]
    r = ws.api.patch(url, json={"config": {"group_by": "Status", "sort": "Score.desc"}})
    assert r.status_code == 200 and r.json()["config"]["sort"] == "Score.desc"
    # changing the type checks the kept config against the new type
    r = ws.api.patch(url, json={"view_type": "calendar"})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"
    r = ws.api.patch(url, json={"view_type": "calendar", "config": {"date_column": "Due"}})
    assert r.status_code == 200 and r.json()["view_type"] == "calendar"
    r = ws.api.patch(url, json={"config": {"date_column": "Nope"}})
    assert r.status_code == 400 and r.json()["code"] == "UNKNOWN_COLUMN"
    assert ws.api.get(url).json()["config"] == {"date_column": "Due"}


def test_delete_view(ws, table):
    v = create(ws, table, {"name": "Gone", "view_type": "grid"}).json()
    url = f"{views_url(table)}/{v['id']}"
    r = ws.api.delete(url)
    assert r.status_code == 200 and r.json() == {"id": v["id"], "deleted": True}
    assert ws.api.get(url).status_code == 404
    assert ws.api.delete(url).json()["code"] == "NOT_FOUND"
    assert ws.api.patch(url, json={"name": "x"}).status_code == 404


def test_unknown_table_or_view_is_404(ws, table):
    assert ws.api.get("/tables/999999999/views").json()["code"] == "NOT_FOUND"
    assert ws.api.get(f"{views_url(table)}/999999999").json()["code"] == "NOT_FOUND"


def test_views_go_with_their_table(ws, table):
    v = create(ws, table, {"name": "V", "view_type": "grid"}).json()
    assert ws.api.delete(f"/tables/{table['id']}").status_code == 200
    assert ws.api.get(f"{views_url(table)}/{v['id']}").status_code == 404


def test_read_grant_lists_views_but_only_full_access_changes_them(ws, table):
    v = create(ws, table, {"name": "Shared", "view_type": "grid"}).json()
    reader = ws.client(ws.token("rest_api", profile_id=ws.profile([{"table_id": table["id"], "read": True}])["id"])["token"])
    assert [x["id"] for x in reader.get(views_url(table)).json()] == [v["id"]]
    assert reader.get(f"{views_url(table)}/{v['id']}").status_code == 200
    for r in (
        reader.post(views_url(table), json={"name": "Mine", "view_type": "grid"}),
        reader.patch(f"{views_url(table)}/{v['id']}", json={"name": "Theirs"}),
        reader.delete(f"{views_url(table)}/{v['id']}"),
    ):
        assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN"
    stranger = ws.client(ws.token("rest_api", profile_id=ws.profile([])["id"])["token"])
    assert stranger.get(views_url(table)).json()["code"] in ("FORBIDDEN", "NOT_FOUND")
    # a rest_api token has full access to the tables it creates
    owner = ws.client(ws.token("rest_api", profile_id=ws.profile([])["id"])["token"])
    own = ws.create_table("Own", [{"name": "Name", "type": "text"}], client=owner)
    assert owner.post(views_url(own), json={"name": "Mine", "view_type": "grid"}).status_code == 201


def test_views_are_refused_on_a_read_only_plan(ws, table, admin):
    v = create(ws, table, {"name": "V", "view_type": "grid"}).json()
    assert admin.patch(f"/workspaces/{ws.id}", json={"read_only": True}).status_code == 200
    r = create(ws, table, {"name": "W", "view_type": "grid"})
    assert r.status_code == 403 and r.json()["code"] == "PLAN_READ_ONLY"
    assert ws.api.get(f"{views_url(table)}/{v['id']}").status_code == 200


# --------------------------------------------------------------------------- ?view=


@pytest.fixture
def seeded(ws, table):
    rows = [
        {"Title": "a", "Score": 1, "Status": "todo"},
        {"Title": "b", "Score": 5, "Status": "todo"},
        {"Title": "c", "Score": 3, "Status": "done"},
        {"Title": "d", "Score": 4, "Status": "todo"},
        {"Title": "e", "Status": "todo"},
    ]
    r = ws.api.post(f"/tables/{table['id']}/records/batch", json={"rows": rows})
    assert r.status_code == 200 and all("record" in x for x in r.json()["results"]), r.text
    return table


def titles(r):
    assert r.status_code == 200, r.text
    return [rec["fields"]["Title"] for rec in r.json()["records"]]


def records_url(table):
    return f"/tables/{table['id']}/records"


def test_view_param_applies_the_views_filters_and_sort(ws, seeded):
    v = create(ws, seeded, {"name": "Todo", "view_type": "grid",
                            "config": {"filters": {"Status": "eq.todo", "Score": "gte.2"}, "sort": "Score.desc"}}).json()
    assert titles(ws.api.get(records_url(seeded), params={"view": v["id"]})) == ["b", "d"]


def test_view_filters_combine_with_query_filters_and_order_overrides_sort(ws, seeded):
    v = create(ws, seeded, {"name": "Todo", "view_type": "kanban",
                            "config": {"group_by": "Status", "filters": {"Status": "eq.todo"},
                                       "sort": "Score.desc.nullslast"}}).json()
    url = records_url(seeded)
    assert titles(ws.api.get(url, params={"view": v["id"], "Score": "lt.5"})) == ["d", "a"]
    assert titles(ws.api.get(url, params={"view": v["id"], "order": "Title.desc"})) == ["e", "d", "b", "a"]
    assert titles(ws.api.get(url, params={"view": v["id"], "limit": 2, "offset": 1})) == ["d", "a"]


def test_view_without_filters_lists_everything(ws, seeded):
    form = create(ws, seeded, {"name": "Form", "view_type": "form", "config": {"fields": ["Title"]}}).json()
    assert sorted(titles(ws.api.get(records_url(seeded), params={"view": form["id"]}))) == ["a", "b", "c", "d", "e"]


def test_unknown_view_param_is_404(ws, seeded, make_workspace):
    other = ws.create_table("Other", [{"name": "Name", "type": "text"}])
    v_other = create(ws, other, {"name": "X", "view_type": "grid"}).json()
    for ref in ("999999999", "abc", str(v_other["id"])):
        r = ws.api.get(records_url(seeded), params={"view": ref})
        assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND", ref


def test_view_terms_on_force_deleted_columns_are_removed(ws, seeded):
    v = create(ws, seeded, {"name": "Todo", "view_type": "grid",
                            "config": {"filters": {"Status": "eq.todo", "Score": "gte.4"}, "sort": "Score.asc"}}).json()
    score = next(c for c in seeded["columns"] if c["name"] == "Score")
    r = ws.api.delete(f"/tables/{seeded['id']}/columns/{score['id']}")
    assert r.status_code == 409 and r.json()["code"] == "COLUMN_IN_USE"
    assert {"kind": "view", "id": v["id"], "name": "Todo", "table_id": seeded["id"]} in r.json()["dependents"]
    assert ws.api.delete(f"/tables/{seeded['id']}/columns/{score['id']}?force=true").status_code == 200
    got = ws.api.get(f"/tables/{seeded['id']}/views/{v['id']}").json()["config"]
    assert got == {"filters": {"Status": "eq.todo"}, "sort": ""}
    assert titles(ws.api.get(records_url(seeded), params={"view": v["id"]})) == ["a", "b", "d", "e"]


def test_list_form_filters_hold_two_conditions_on_one_column(ws, seeded):
    body = {"name": "Mid", "view_type": "grid", "config": {
        "filters": [{"column": "Score", "op": "gte", "value": 2}, {"column": "Score", "op": "lt", "value": 5},
                    {"column": "Status", "op": "not.eq", "value": "done"}],
        "sort": "Score.asc"}}
    r = create(ws, seeded, body)
    assert r.status_code == 201, r.text
    assert titles(ws.api.get(records_url(seeded), params={"view": r.json()["id"]})) == ["d"]
    assert r.json()["config"]["filters"] == body["config"]["filters"]
    score = next(c for c in seeded["columns"] if c["name"] == "Score")
    ws.api.patch(f"/tables/{seeded['id']}/columns/{score['id']}", json={"name": "Points"})
    got = ws.api.get(f"/tables/{seeded['id']}/views/{r.json()['id']}").json()["config"]
    assert [f["column"] for f in got["filters"]] == ["Points", "Points", "Status"] and got["sort"] == "Points.asc"
    bad = create(ws, seeded, {"name": "Bad", "view_type": "grid",
                              "config": {"filters": [{"column": "Nope", "op": "eq", "value": 1}]}})
    assert bad.status_code == 400 and bad.json()["code"] == "UNKNOWN_COLUMN"
    bad = create(ws, seeded, {"name": "Bad", "view_type": "grid",
                              "config": {"filters": [{"column": "Score", "op": "nearly", "value": 1}]}})
    assert bad.status_code == 400 and bad.json()["code"] == "UNKNOWN_OPERATOR"


def test_a_view_with_an_or_group_lists_the_right_rows(ws, seeded):
    url = records_url(seeded)
    for filters in ({"or": "(Score.gte.5,Status.eq.done)"}, [{"or": "(Score.gte.5, Status.eq.done)"}]):
        r = create(ws, seeded, {"name": f"Grouped {type(filters).__name__}", "view_type": "grid",
                                "config": {"filters": filters, "sort": "Title.asc"}})
        assert r.status_code == 201, r.text
        assert r.json()["config"]["filters"] in ({"or": "(Score.gte.5,Status.eq.done)"},
                                                 [{"or": "(Score.gte.5,Status.eq.done)"}])  # normal form
        assert titles(ws.api.get(url, params={"view": r.json()["id"]})) == ["b", "c"]
        # the group ANDs with the listing's own filters and groups
        assert titles(ws.api.get(url, params={"view": r.json()["id"], "Score": "lt.5"})) == ["c"]
        assert titles(ws.api.get(url, params={"view": r.json()["id"], "or": "(Title.eq.b,Title.eq.a)"})) == ["b"]
    both = create(ws, seeded, {"name": "Both", "view_type": "grid", "config": {"sort": "Title.asc", "filters": [
        {"column": "Title", "op": "neq", "value": "b"}, {"or": "(Score.gte.5,Status.eq.done)"}]}}).json()
    assert titles(ws.api.get(url, params={"view": both["id"]})) == ["c"]
    nested = create(ws, seeded, {"name": "Nested", "view_type": "grid", "config": {
        "filters": {"not.or": "(Score.gte.4,and(Status.eq.done,Title.eq.c))", "Score": "gte.0"}}}).json()
    assert titles(ws.api.get(url, params={"view": nested["id"]})) == ["a"]
    for group, code in (("(Nope.eq.1,Score.gt.1)", "UNKNOWN_COLUMN"), ("(Score.zz.1)", "VALIDATION_ERROR"),
                        ("Score.eq.1", "VALIDATION_ERROR"), ("(Score.eq.abc)", "INVALID_VALUE")):
        bad = create(ws, seeded, {"name": "Bad", "view_type": "grid", "config": {"filters": {"or": group}}})
        assert bad.status_code == 400 and bad.json()["code"] == code, (group, bad.text)


def test_a_rename_carries_into_a_views_group(ws, seeded):
    v = create(ws, seeded, {"name": "Grouped", "view_type": "grid", "config": {
        "filters": [{"or": "(Score.gte.5,and(Status.eq.done,Score.lt.4))"}], "sort": "Title.asc"}}).json()
    score = next(c for c in seeded["columns"] if c["name"] == "Score")
    r = ws.api.patch(f"/tables/{seeded['id']}/columns/{score['id']}", json={"name": "Points, (x.y)"})
    assert r.status_code == 200, r.text
    got = ws.api.get(f"/tables/{seeded['id']}/views/{v['id']}").json()["config"]
    assert got["filters"] == [{"or": '("Points, (x.y)".gte.5,and(Status.eq.done,"Points, (x.y)".lt.4))'}]
    assert titles(ws.api.get(records_url(seeded), params={"view": v["id"]})) == ["b", "c"]
    # the decoded text is valid input: writing it back keeps the view as it is
    up = ws.api.patch(f"/tables/{seeded['id']}/views/{v['id']}", json={"config": got})
    assert up.status_code == 200 and up.json()["config"] == got, up.text


def test_deleting_a_column_used_only_inside_a_views_group_is_column_in_use(ws, seeded):
    v = create(ws, seeded, {"name": "Grouped", "view_type": "grid", "config": {
        "filters": {"or": "(Title.eq.a,and(Status.eq.done,Score.gt.1))", "Title": "neq.zz"}}}).json()
    assert sorted(titles(ws.api.get(records_url(seeded), params={"view": v["id"]}))) == ["a", "c"]
    score = next(c for c in seeded["columns"] if c["name"] == "Score")
    r = ws.api.delete(f"/tables/{seeded['id']}/columns/{score['id']}")
    assert r.status_code == 409 and r.json()["code"] == "COLUMN_IN_USE", r.text
    assert {"kind": "view", "id": v["id"], "name": "Grouped", "table_id": seeded["id"]} in r.json()["dependents"]
    # forced: the whole group goes (a term of its own, as a plain condition would), never
    # one condition inside it, which would make the group match what nobody wrote
    assert ws.api.delete(f"/tables/{seeded['id']}/columns/{score['id']}?force=true").status_code == 200
    got = ws.api.get(f"/tables/{seeded['id']}/views/{v['id']}").json()["config"]
    assert got == {"filters": {"Title": "neq.zz"}}
    assert sorted(titles(ws.api.get(records_url(seeded), params={"view": v["id"]}))) == ["a", "b", "c", "d", "e"]
