"""The operator admin API."""

from __future__ import annotations

import httpx


def test_admin_api_needs_the_operator_key(base_url):
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        r = httpx.get(f"{base_url}/functions/v1/admin/workspaces", headers=headers)
        assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED"


def test_workspace_lifecycle(admin):
    r = admin.post("/workspaces", json={"name": "Acme", "plan": "starter"})
    assert r.status_code == 201
    ws = r.json()
    assert ws["name"] == "Acme" and ws["plan"] == "starter" and ws["read_only"] is False
    assert admin.patch(f"/workspaces/{ws['id']}", json={"plan": "pro"}).json()["plan"] == "pro"
    assert any(w["id"] == ws["id"] for w in admin.get("/workspaces").json())
    assert admin.post("/workspaces", json={"name": "X", "plan": "platinum"}).json()["code"] == "VALIDATION_ERROR"
    assert admin.patch("/workspaces/999999", json={"plan": "pro"}).status_code == 404


def test_profiles_and_grants(ws, admin):
    t = ws.create_table("T")
    p = ws.profile([{"table_id": t["id"], "read": True, "update": True}], name="editors")
    assert p["grants"] == [{"table_id": t["id"], "read": True, "create": False, "update": True, "delete": False}]
    r = admin.post(f"/workspaces/{ws.id}/profiles", json={"name": "bad", "grants": [{"table_id": 999999}]})
    assert r.status_code == 400
    r = admin.post(f"/workspaces/{ws.id}/profiles", json={"name": "editors"})
    assert r.status_code == 409


def test_tokens_are_shown_once_and_validated(ws, admin):
    r = admin.post(f"/workspaces/{ws.id}/tokens", json={"type": "rest_api", "name": "backend", "expires_in_seconds": 3600})
    assert r.status_code == 201
    body = r.json()
    assert body["token"].startswith("wds_rest_") and body["expires_at"]
    assert admin.post(f"/workspaces/{ws.id}/tokens", json={"type": "root", "name": "x"}).status_code == 400
    assert admin.post(f"/workspaces/{ws.id}/tokens", json={"type": "rest_api", "name": "x", "profile_id": 999999}).status_code == 400
    assert admin.post(f"/workspaces/{ws.id}/tokens/999999/rotate").status_code == 404
