"""Every failure is {error, code}: never FastAPI's {"detail"}, never a traceback or a 500."""

from __future__ import annotations

import httpx


def test_malformed_json_is_a_validation_error(ws):
    t = ws.create_table("E", [{"name": "A", "type": "text"}])
    r = ws.api.post(f"/tables/{t['id']}/records", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR" and "detail" not in r.json()


def test_wrong_body_shapes_are_validation_errors(ws):
    t = ws.create_table("E", [{"name": "A", "type": "text"}])
    for body in ([], "x", {"fields": []}, {"fields": {"A": "x"}, "extra": 1}, {"fields": {"A": "x"}, "row_data": {}}, {}):
        r = ws.api.post(f"/tables/{t['id']}/records", json=body)
        assert r.status_code == 400, (body, r.text)
        assert set(r.json()) == {"error", "code"}


def test_unknown_route_and_method_use_the_error_shape(ws, base_url):
    r = httpx.get(f"{base_url}/functions/v1/rest-api/nope")
    assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"
    r = ws.api.put("/tables")
    assert r.status_code == 405 and r.json()["code"] == "METHOD_NOT_ALLOWED"


def test_non_numeric_table_id_is_a_validation_error(ws):
    r = ws.api.get("/tables/abc/records")
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"


def test_openapi_lists_every_endpoint(base_url):
    spec = httpx.get(f"{base_url}/openapi.json").json()
    paths = spec["paths"]
    for path in ("/functions/v1/rest-api/tables", "/functions/v1/rest-api/tables/{table_id}",
                 "/functions/v1/rest-api/tables/{table_id}/columns",
                 "/functions/v1/rest-api/tables/{table_id}/columns/{column_id}",
                 "/functions/v1/rest-api/tables/{table_id}/records",
                 "/functions/v1/rest-api/tables/{table_id}/records/{record_id}",
                 "/functions/v1/rest-api/tables/{table_id}/records/batch",
                 "/functions/v1/admin/workspaces", "/healthz"):
        assert path in paths, path
    create = paths["/functions/v1/rest-api/tables"]["post"]
    assert "requestBody" in create and "201" in create["responses"]


def test_healthz_is_ok_when_everything_is_ready(base_url):
    r = httpx.get(f"{base_url}/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok"
