"""The usage log: every call recorded (workspace, token, door, method, route template,
status, duration) and readable through the admin API and ``GET {rest}/usage``."""

from __future__ import annotations

import httpx

from tests.limits.conftest import wait_for

TABLE_ROUTE = "/functions/v1/rest-api/tables/{table_id}"


def _rows(db, ws_id):
    return db.execute(
        "SELECT token_id, door, method, route, status, duration_ms FROM wds.usage WHERE workspace_id = %s",
        (ws_id,),
    ).fetchall()


def test_calls_are_logged_with_route_templates_door_status_and_duration(ws, db):
    t = ws.create_table("U")
    assert ws.api.get(f"/tables/{t['id']}").status_code == 200
    assert ws.api.get("/tables/999999").status_code == 404
    assert ws.api.post("/sql", json={"query": "DROP TABLE U"}).status_code == 400
    assert wait_for(lambda: len(_rows(db, ws.id)) >= 4, timeout=5)  # written off the request path
    rows = {(door, method, route, status) for _, door, method, route, status, _ in _rows(db, ws.id)}
    assert ("rest", "POST", "/functions/v1/rest-api/tables", 201) in rows
    assert ("rest", "GET", TABLE_ROUTE, 200) in rows
    assert ("rest", "GET", TABLE_ROUTE, 404) in rows  # the template, never the raw path
    assert ("sql", "POST", "/functions/v1/rest-api/sql", 400) in rows
    assert all(r[5] >= 0 and r[0] is not None for r in _rows(db, ws.id))


def test_refused_calls_are_logged_too(make_workspace, db):
    ws = make_workspace(plan="free")
    for _ in range(61):
        last = ws.api.get("/tables/1")
    assert last.status_code == 429
    assert wait_for(lambda: any(r[4] == 429 for r in _rows(db, ws.id)), timeout=5)
    assert {r[3] for r in _rows(db, ws.id)} == {TABLE_ROUTE}


def test_admin_usage_counts_requests_by_day_token_and_status(ws, admin):
    other = ws.token("rest_api")
    client = ws.client(other["token"])
    for _ in range(3):
        ws.api.get("/tables")
    client.get("/tables")
    client.get("/tables/999999")
    r = admin.get(f"/workspaces/{ws.id}/usage", params={"days": 7})
    assert r.status_code == 200
    u = r.json()
    assert u["workspace_id"] == ws.id and u["days"] == 7 and u["total"] == 5
    assert len(u["by_day"]) == 1 and u["by_day"][0]["requests"] == 5
    by_token = {x["token_id"]: x["requests"] for x in u["by_token"]}
    assert by_token[other["id"]] == 2 and sum(by_token.values()) == 5
    assert {x["token_name"] for x in u["by_token"]} == {"builder", other["name"]}
    assert {x["status"]: x["requests"] for x in u["by_status"]} == {200: 4, 404: 1}
    assert u["by_door"] == [{"door": "rest", "requests": 5}]
    assert sum(x["requests"] for x in u["rows"]) == 5
    assert u["quotas"]["api_requests"] == {"used": 5, "limit": 1_000_000}


def test_rest_usage_reports_the_calling_tokens_workspace(make_workspace):
    ws, other = make_workspace(), make_workspace()
    ws.api.get("/tables")
    other.api.get("/tables")
    r = ws.api.get("/usage?days=1")
    assert r.status_code == 200
    u = r.json()
    assert u["workspace_id"] == ws.id and u["days"] == 1 and u["total"] == 1  # this call is logged after it answers
    assert set(u) >= {"by_day", "by_token", "by_status", "by_door", "rows", "month", "quotas"}
    assert ws.api.get("/usage?days=0").json()["code"] == "VALIDATION_ERROR"


def test_admin_usage_needs_a_known_workspace_and_the_operator_key(admin, base_url):
    assert admin.get("/workspaces/999999/usage").json()["code"] == "NOT_FOUND"
    assert httpx.get(f"{base_url}/functions/v1/admin/workspaces/1/usage").status_code == 401
