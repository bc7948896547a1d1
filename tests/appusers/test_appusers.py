"""App users: sign-up, sign-in, relay access, expiry, refresh rotation, sign-out, throttling."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import ApiProcess, Services, running_api
from tests.realtime.conftest import open_ws, recv, subscribe

PASSWORD = "correct horse battery"


@pytest.fixture(scope="module")
def short_api(services: Services) -> Iterator[ApiProcess]:
    """An API process whose app-user access tokens live one second."""
    yield from running_api(services, name="api-short", WDS_APP_ACCESS_TTL_S="1")


def _auth(base_url: str) -> httpx.Client:
    return httpx.Client(base_url=f"{base_url}/functions/v1/auth", timeout=60)


def _as_user(ws, token: str) -> httpx.Client:
    return ws.client(token)


def _app(ws, admin) -> dict[str, Any]:
    """Notes (relay: read + create) and Secret (no grant); app users enabled."""
    notes = ws.create_table("Notes", [{"name": "Title", "type": "text"}])
    secret = ws.create_table("Secret", [{"name": "X", "type": "text"}])
    profile = ws.profile([{"table_id": notes["id"], "read": True, "create": True}], name="relay")
    assert admin.patch(f"/workspaces/{ws.id}", json={"relay_profile_id": profile["id"]}).status_code == 200
    return {"notes": notes, "secret": secret, "profile": profile}


def _signup(ws, email: str | None = None, password: str = PASSWORD, **extra: Any) -> httpx.Response:
    with _auth(ws.base_url) as auth:
        return auth.post("/signup", json={"workspace_id": ws.id, "email": email or f"u{secrets.token_hex(4)}@example.com",
                                          "password": password, **extra})


def _signin(base_url: str, ws_id: int, email: str, password: str = PASSWORD) -> httpx.Response:
    with _auth(base_url) as auth:
        return auth.post("/token", json={"grant_type": "password", "workspace_id": ws_id, "email": email, "password": password})


def _refresh(base_url: str, ws_id: int, token: str) -> httpx.Response:
    with _auth(base_url) as auth:
        return auth.post("/token", json={"grant_type": "refresh_token", "workspace_id": ws_id, "refresh_token": token})


def test_signup_creates_the_users_record_and_a_session(ws, admin):
    assert _signup(ws).json()["code"] == "FORBIDDEN"  # no relay profile: app users are off
    _app(ws, admin)
    assert _signup(ws, fields={"Name": "Ada"}).json()["code"] == "SIGNUP_FIELD_NOT_ALLOWED"  # none by default
    assert admin.patch(f"/workspaces/{ws.id}", json={"signup_fields": ["Name"]}).json()["signup_fields"] == ["Name"]
    r = _signup(ws, "Ada@Example.com", fields={"Name": "Ada"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["expires_in"] == 900 and body["token_type"] == "bearer" and body["refresh_token"]
    assert body["user"]["email"] == "ada@example.com" and body["user"]["name"] == "Ada"
    users_id = next(t["id"] for t in ws.api.get("/tables").json() if t["name"] == "Users")
    users = ws.api.get(f"/tables/{users_id}").json()
    assert [c["name"] for c in users["columns"]] == ["Email", "Name"]
    rows = ws.api.get(f"/tables/{users['id']}/records").json()["records"]
    assert [r["fields"] for r in rows] == [{"Email": "ada@example.com", "Name": "Ada"}]
    assert rows[0]["id"] == body["user"]["id"]
    sql = ws.api.post("/sql", json={"query": "SELECT * FROM Users"})
    assert sql.status_code == 200, sql.text
    assert PASSWORD not in sql.text and "argon2" not in sql.text
    assert _signup(ws, "ADA@example.com").json()["code"] == "CONFLICT"


@pytest.mark.parametrize("password", ["short", "password123", "aaaaaaaaaa", "qwertyuiop"])
def test_weak_passwords_are_refused(ws, admin, password):
    _app(ws, admin)
    r = _signup(ws, password=password)
    assert r.status_code == 400 and r.json()["code"] == "WEAK_PASSWORD"


def test_signin_and_relay_access_allows_only_what_the_profile_grants(ws, admin):
    app = _app(ws, admin)
    email = "bob@example.com"
    _signup(ws, email)
    assert _signin(ws.base_url, ws.id, email, "wrong password!").json()["code"] == "INVALID_CREDENTIALS"
    assert _signin(ws.base_url, ws.id, "nobody@example.com").status_code == 401
    s = _signin(ws.base_url, ws.id, email)
    assert s.status_code == 200, s.text
    user = _as_user(ws, s.json()["access_token"])
    notes, secret = app["notes"]["id"], app["secret"]["id"]
    assert user.post(f"/tables/{notes}/records", json={"fields": {"Title": "hi"}}).status_code == 201
    listed = user.get(f"/tables/{notes}/records").json()["records"]
    assert [r["fields"]["Title"] for r in listed] == ["hi"]
    assert user.patch(f"/tables/{notes}/records/{listed[0]['id']}", json={"fields": {"Title": "x"}}).json()["code"] == "FORBIDDEN"
    assert user.delete(f"/tables/{notes}/records/{listed[0]['id']}").status_code == 403
    assert user.get(f"/tables/{secret}/records").status_code == 403
    assert user.post("/tables", json={"name": "Mine", "columns": []}).json()["code"] == "FORBIDDEN"
    assert user.post("/sql", json={"query": "SELECT 1"}).status_code == 403
    assert [t["name"] for t in user.get("/tables").json()] == ["Notes"]
    with _auth(ws.base_url) as auth:
        me = auth.get("/user", headers={"Authorization": f"Bearer {s.json()['access_token']}"}).json()
    assert me["email"] == email and me["id"] == s.json()["user"]["id"]
    # the relay profile's grants change → the session's rights change
    admin.put(f"/workspaces/{ws.id}/profiles/{app['profile']['id']}/grants",
              json=[{"table_id": notes, "read": True}])
    time.sleep(0.3)
    assert user.post(f"/tables/{notes}/records", json={"fields": {"Title": "no"}}).status_code == 403


def test_access_tokens_expire_and_refresh_rotates(ws, admin, short_api):
    app = _app(ws, admin)
    email = "carol@example.com"
    _signup(ws, email)
    s = _signin(short_api.base_url, ws.id, email).json()
    assert s["expires_in"] == 1
    user = _as_user(ws, s["access_token"])
    assert user.get(f"/tables/{app['notes']['id']}/records").status_code == 200
    time.sleep(2.2)
    expired = user.get(f"/tables/{app['notes']['id']}/records")
    assert expired.status_code == 401 and expired.json()["code"] == "TOKEN_EXPIRED"
    r1 = s["refresh_token"]
    s2 = _refresh(ws.base_url, ws.id, r1)
    assert s2.status_code == 200 and s2.json()["refresh_token"] != r1
    fresh = _as_user(ws, s2.json()["access_token"])
    assert fresh.get(f"/tables/{app['notes']['id']}/records").status_code == 200
    # reusing the rotated token revokes the whole family, including the new session
    assert _refresh(ws.base_url, ws.id, r1).status_code == 401
    assert _refresh(ws.base_url, ws.id, s2.json()["refresh_token"]).status_code == 401
    time.sleep(0.3)
    assert fresh.get(f"/tables/{app['notes']['id']}/records").status_code == 401


def test_logout_ends_the_session(ws, admin):
    app = _app(ws, admin)
    s = _signup(ws).json()
    user = _as_user(ws, s["access_token"])
    assert user.get(f"/tables/{app['notes']['id']}/records").status_code == 200
    with _auth(ws.base_url) as auth:
        assert auth.post("/logout", headers={"Authorization": f"Bearer {s['access_token']}"}).status_code == 204
    time.sleep(0.3)
    assert user.get(f"/tables/{app['notes']['id']}/records").status_code == 401
    assert _refresh(ws.base_url, ws.id, s["refresh_token"]).status_code == 401


def test_failed_signins_are_throttled_per_email(ws, admin):
    _app(ws, admin)
    email = f"dave{secrets.token_hex(3)}@example.com"
    _signup(ws, email)
    codes = [_signin(ws.base_url, ws.id, email, "not the password").status_code for _ in range(5)]
    assert codes == [401] * 5
    r = _signin(ws.base_url, ws.id, email)  # even the right password, for a while
    assert r.status_code == 429 and r.json()["code"] == "AUTH_RATE_LIMIT" and int(r.headers["retry-after"]) > 0


def test_app_users_use_storage_under_their_own_prefix_and_realtime_through_the_relay(ws, admin):
    app = _app(ws, admin)
    assert httpx.post(f"{ws.base_url}/storage/v1/bucket", json={"name": "avatars"},
                      headers={"Authorization": f"Bearer {ws.builder_token}"}).status_code == 201
    grant = admin.put(f"/workspaces/{ws.id}/profiles/{app['profile']['id']}/bucket_grants",
                      json=[{"bucket": "avatars", "read": True, "write": True}])
    assert grant.status_code == 200, grant.text
    s = _signup(ws).json()
    uid, token = s["user"]["id"], s["access_token"]
    with httpx.Client(base_url=f"{ws.base_url}/storage/v1", headers={"Authorization": f"Bearer {token}"}) as st:
        assert st.post(f"/object/avatars/users/{uid}/me.png", content=b"\x89PNG\r\n\x1a\n").status_code == 201
        assert st.post("/object/avatars/users/999999/me.png", content=b"x").json()["code"] == "FORBIDDEN"
        assert st.post("/bucket", json={"name": "mine"}).json()["code"] == "FORBIDDEN"
    with open_ws(ws.base_url, token) as conn:
        conn.send(json.dumps({"type": "subscribe", "table": app["secret"]["id"]}))
        assert recv(conn)["code"] == "FORBIDDEN"
        subscribe(conn, "Notes")
        ws.api.post(f"/tables/{app['notes']['id']}/records", json={"fields": {"Title": "live"}})
        assert recv(conn)["record"]["fields"]["Title"] == "live"


def test_an_app_user_changes_only_its_own_profile_row_and_never_its_email(ws, admin):
    """Even with every right on the Users table in the relay profile, an app user may not
    create, delete or change another user's profile row, nor its own e-mail (which signs it
    in): an app user could rename, delete or take another's e-mail (security.md)."""
    app = _app(ws, admin)
    ada = _signup(ws, "ada@example.com").json()
    bob = _signup(ws, "bob@example.com").json()
    users_id = next(t["id"] for t in ws.api.get("/tables").json() if t["name"] == "Users")
    assert ws.api.post(f"/tables/{users_id}/columns", json={"name": "Bio", "type": "text"}).status_code == 201
    r = admin.put(f"/workspaces/{ws.id}/profiles/{app['profile']['id']}/grants",
                  json=[{"table_id": users_id, "read": True, "create": True, "update": True, "delete": True}])
    assert r.status_code == 200, r.text
    time.sleep(0.3)
    user = _as_user(ws, ada["access_token"])
    me, other = ada["user"]["id"], bob["user"]["id"]
    refused = [
        user.patch(f"/tables/{users_id}/records/{other}", json={"fields": {"Bio": "hacked"}}),
        user.delete(f"/tables/{users_id}/records/{other}"),
        user.delete(f"/tables/{users_id}/records/{me}"),
        user.post(f"/tables/{users_id}/records", json={"fields": {"Email": "ghost@example.com"}}),
        user.post(f"/tables/{users_id}/records/batch", json={"rows": [{"fields": {"Email": "g2@example.com"}}]}),
        user.patch(f"/tables/{users_id}/records/{me}", json={"fields": {"Email": "bob@example.com"}}),
    ]
    for r in refused:
        assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN", r.text
    ok = user.patch(f"/tables/{users_id}/records/{me}", json={"fields": {"Bio": "mine"}})
    assert ok.status_code == 200 and ok.json()["fields"]["Bio"] == "mine", ok.text
    rows = {r["id"]: r["fields"] for r in ws.api.get(f"/tables/{users_id}/records").json()["records"]}
    assert rows == {me: {"Email": "ada@example.com", "Name": None, "Bio": "mine"},
                    other: {"Email": "bob@example.com", "Name": None, "Bio": None}}
    with _auth(ws.base_url) as auth:
        who = auth.get("/user", headers={"Authorization": f"Bearer {ada['access_token']}"}).json()
    assert who["email"] == "ada@example.com"
    # reading follows the relay profile's grant, as on any table
    assert user.get(f"/tables/{users_id}/records/{other}").status_code == 200


def test_the_sign_in_email_column_and_the_users_table_keep_their_names_while_accounts_exist(ws, admin):
    """Sign-up writes the Users table's Email column by name: renamed (or retyped, or the
    table renamed) every sign-up failed with a misleading REQUIRED_FIELD, and a retype
    with allow_loss wiped every e-mail."""
    _app(ws, admin)
    assert _signup(ws, "ada@example.com").status_code == 201
    users = next(t for t in ws.api.get("/tables").json() if t["name"] == "Users")
    email = next(c for c in ws.api.get(f"/tables/{users['id']}").json()["columns"] if c["name"] == "Email")
    path = f"/tables/{users['id']}/columns/{email['id']}"
    for r in (ws.api.patch(path, json={"name": "Mail"}),
              ws.api.patch(path, json={"type": "number", "allow_loss": True}),
              ws.api.patch(path, json={"column_type": "number", "allow_loss": True}),  # the alias of type
              ws.api.delete(path), ws.api.delete(path, params={"force": "true"}),
              ws.api.patch(f"/tables/{users['id']}", json={"name": "People"})):
        assert r.status_code == 409 and r.json()["code"] == "CONFLICT", r.text
    # what sign-up does not depend on still changes: another column, the icon, the same name
    assert ws.api.patch(path, json={"name": "Email"}).status_code == 200
    assert ws.api.post(f"/tables/{users['id']}/columns", json={"name": "Bio", "type": "text"}).status_code == 201
    assert ws.api.patch(f"/tables/{users['id']}", json={"icon": "user"}).status_code == 200
    assert _signup(ws, "bob@example.com").status_code == 201
    rows = ws.api.get(f"/tables/{users['id']}/records").json()["records"]
    assert sorted(r["fields"]["Email"] for r in rows) == ["ada@example.com", "bob@example.com"]


def test_unknown_auth_body_keys_are_refused_and_create_nothing(ws, admin):
    """Sign-up took {"role": "admin"} with 201 and ignored the key: a client that meant to
    set something learnt nothing. Unknown keys of sign-up, sign-in, refresh and sign-out
    bodies are 400 VALIDATION_ERROR naming the key, and the refused sign-up made no account."""
    _app(ws, admin)
    r = _signup(ws, "eve@example.com", role="admin")
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", r.text
    assert "role" in r.json()["error"]
    assert _signin(ws.base_url, ws.id, "eve@example.com").json()["code"] == "INVALID_CREDENTIALS"
    r = _signup(ws, "eve@example.com")  # the e-mail was never taken
    assert r.status_code == 201, r.text
    with _auth(ws.base_url) as auth:
        r = auth.post("/token", json={"grant_type": "password", "workspace_id": ws.id, "email": "eve@example.com",
                                      "password": PASSWORD, "scope": "admin"})
        assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR" and "scope" in r.json()["error"]
        refresh = _signin(ws.base_url, ws.id, "eve@example.com").json()["refresh_token"]
        r = auth.post("/logout", json={"workspace_id": ws.id, "refresh_token": refresh, "everywhere": True})
        assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", r.text
        assert _refresh(ws.base_url, ws.id, refresh).status_code == 200  # the refused sign-out ended nothing


def test_record_steps_run_by_an_app_users_write_keep_its_profile_row_rules(ws, admin):
    """A record step acts with the writer's rights (docs/decisions.md); for an app user
    those include the Users-table rules a direct write has: its own row only, never its
    e-mail, never a created or deleted profile row, whatever the relay profile grants.
    Before, the step was checked against the relay grants alone, so a note pointing a
    builder's update_record step at another user's row changed that row."""
    app = _app(ws, admin)
    ada = _signup(ws, "ada@example.com").json()
    bob = _signup(ws, "bob@example.com").json()
    me, other = ada["user"]["id"], bob["user"]["id"]
    users_id = next(t["id"] for t in ws.api.get("/tables").json() if t["name"] == "Users")
    assert ws.api.post(f"/tables/{users_id}/columns", json={"name": "Bio", "type": "text"}).status_code == 201
    steps = ws.create_table("Steps", [
        {"name": "Target", "type": "number"},
        {"name": "Bio", "type": "update_record",
         "config": {"table_id": users_id, "record_id": "{{ Target }}", "fields": {"Bio": "set by a step"}}},
    ])
    mail = ws.create_table("Mail", [
        {"name": "Target", "type": "number"},
        {"name": "Mail", "type": "update_record",
         "config": {"table_id": users_id, "record_id": "{{ Target }}", "fields": {"Email": "bob@example.com"}}},
    ])
    spawn = ws.create_table("Spawn", [
        {"name": "N", "type": "text"},
        {"name": "Ghost", "type": "create_record",
         "config": {"table_id": users_id, "fields": {"Email": "ghost@example.com"}}},
    ])
    kill = ws.create_table("Kill", [
        {"name": "Target", "type": "number"},
        {"name": "Gone", "type": "delete_record", "config": {"table_id": users_id, "record_id": "{{ Target }}"}},
    ])
    grants = [{"table_id": t["id"], "read": True, "create": True} for t in (steps, mail, spawn, kill)]
    r = admin.put(f"/workspaces/{ws.id}/profiles/{app['profile']['id']}/grants", json=[
        {"table_id": app["notes"]["id"], "read": True, "create": True}, *grants,
        {"table_id": users_id, "read": True, "create": True, "update": True, "delete": True}])
    assert r.status_code == 200, r.text
    time.sleep(0.3)
    user = _as_user(ws, ada["access_token"])

    def step(table: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
        r = user.post(f"/tables/{table['id']}/records", json={"fields": fields})
        assert r.status_code == 201, r.text
        return r.json()

    refused = {
        ("Bio", "FORBIDDEN: an app user may change only its own row"): step(steps, {"Target": other}),
        ("Mail", "FORBIDDEN: Email is the e-mail the account signs in with"): step(mail, {"Target": me}),
        ("Ghost", "an app user never creates a row"): step(spawn, {"N": "x"}),
        ("Gone", "an app user never deletes a row"): step(kill, {"Target": me}),  # even its own
    }
    for (column, error), rec in refused.items():
        assert rec["pipeline"]["status"] == "error" and rec["fields"][column] is None, rec
        assert rec["pipeline"]["errors"][column].startswith(error), rec["pipeline"]
    rows = {r["id"]: r["fields"] for r in ws.api.get(f"/tables/{users_id}/records").json()["records"]}
    assert rows == {me: {"Email": "ada@example.com", "Name": None, "Bio": None},
                    other: {"Email": "bob@example.com", "Name": None, "Bio": None}}
    # its own row, through a step, as through a direct write
    ok = step(steps, {"Target": me})
    assert ok["pipeline"]["status"] == "ok" and ok["fields"]["Bio"] == me, ok
    assert ws.api.get(f"/tables/{users_id}/records/{me}").json()["fields"]["Bio"] == "set by a step"
    # a builder's write runs the same step with a builder's rights
    built = ws.api.post(f"/tables/{steps['id']}/records", json={"fields": {"Target": other}}).json()
    assert built["pipeline"]["status"] == "ok", built
    assert ws.api.get(f"/tables/{users_id}/records/{other}").json()["fields"]["Bio"] == "set by a step"
