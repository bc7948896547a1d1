"""Credentials through the operator admin API: stored encrypted, never shown again."""

from __future__ import annotations

import psycopg
import pytest

from tests.outside.conftest import add_credential


def test_a_credential_is_created_listed_and_deleted_without_its_secret(ws, services):
    secret = "tok-" + "s" * 30
    made = add_credential(ws, "crm", "bearer", secret)
    assert set(made) == {"id", "name", "type", "header_name", "hosts", "created_at"} and secret not in str(made)
    assert made["hosts"] == ["127.0.0.1"]
    listed = ws.admin.get(f"/workspaces/{ws.id}/credentials")
    assert listed.status_code == 200 and [c["name"] for c in listed.json()] == ["crm"]
    assert secret not in listed.text
    with psycopg.connect(services.pg.dsn) as conn:
        stored = conn.execute("SELECT secret_enc FROM wds.credentials WHERE id = %s", (made["id"],)).fetchone()[0]
    assert secret.encode() not in bytes(stored)
    r = ws.admin.delete(f"/workspaces/{ws.id}/credentials/{made['id']}")
    assert r.status_code == 200 and r.json() == {"id": made["id"], "deleted": True}
    assert ws.admin.delete(f"/workspaces/{ws.id}/credentials/{made['id']}").json()["code"] == "NOT_FOUND"


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"name": "x", "type": "oauth", "secret": "s"}, 400, "VALIDATION_ERROR"),
    ({"name": "x", "type": "header", "secret": "s"}, 400, "VALIDATION_ERROR"),
    ({"name": "x", "type": "basic", "secret": "no-colon"}, 400, "VALIDATION_ERROR"),
    ({"name": "", "type": "bearer", "secret": "s"}, 400, "VALIDATION_ERROR"),
    ({"name": "x", "type": "bearer", "secret": ""}, 400, "VALIDATION_ERROR"),
    ({"name": "x", "type": "bearer", "secret": "s", "extra": 1}, 400, "VALIDATION_ERROR"),
])
def test_bad_credentials_are_refused(ws, body, status, code):
    r = ws.admin.post(f"/workspaces/{ws.id}/credentials", json=body)
    assert r.status_code == status and r.json()["code"] == code


def test_duplicate_names_conflict_and_unknown_workspaces_are_not_found(ws):
    add_credential(ws, "dup", "query", "abc", header_name="key")
    r = ws.admin.post(f"/workspaces/{ws.id}/credentials",
                      json={"name": "dup", "type": "bearer", "secret": "x", "hosts": ["a.example"]})
    assert r.status_code == 409 and r.json()["code"] == "CONFLICT"
    r = ws.admin.post("/workspaces/999999/credentials",
                      json={"name": "a", "type": "bearer", "secret": "x", "hosts": ["a.example"]})
    assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"


def test_credentials_need_the_admin_key(ws, base_url):
    import httpx

    r = httpx.get(f"{base_url}/functions/v1/admin/workspaces/{ws.id}/credentials",
                  headers={"Authorization": f"Bearer {ws.builder_token}"})
    assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED"
