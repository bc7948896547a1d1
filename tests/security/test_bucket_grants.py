"""Buckets obey grants (issue 22): a token without a bucket grant cannot list, read,
overwrite or sign; an app user reaches only ``users/<its id>/`` unless the relay profile's
grant says ``all_paths``; a file cell cannot smuggle a signed URL of an unreadable object."""

from __future__ import annotations

import secrets
from typing import Any

import httpx

from tests.mcp.conftest import call_tool_sync

PASSWORD = "correct horse battery"


def _storage(ws: Any, token: str) -> httpx.Client:
    client = httpx.Client(base_url=f"{ws.base_url}/storage/v1", headers={"Authorization": f"Bearer {token}"},
                          timeout=60)
    ws.clients.append(client)
    return client


def _signup(ws: Any) -> dict[str, Any]:
    r = httpx.post(f"{ws.base_url}/functions/v1/auth/signup", timeout=60, json={
        "workspace_id": ws.id, "email": f"u{secrets.token_hex(5)}@example.com", "password": PASSWORD})
    assert r.status_code == 201, r.text
    return r.json()


def test_a_rest_token_without_a_bucket_grant_can_neither_read_nor_write_it(ws, admin):
    builder = _storage(ws, ws.builder_token)
    assert builder.post("/bucket", json={"name": "hr"}).status_code == 201
    assert builder.post("/object/hr/users/1/payroll.txt", content=b"salary: 1").status_code == 201
    table = ws.create_table("Docs", [{"name": "Files", "type": "file"}])
    profile = ws.profile([{"table_id": table["id"], "read": True, "create": True}])
    token = ws.token("rest_api", profile_id=profile["id"])["token"]
    st = _storage(ws, token)
    assert st.get("/bucket").json() == []  # not even its name
    for r in (st.get("/bucket/hr"), st.get("/object/list/hr"), st.get("/object/hr/users/1/payroll.txt"),
              st.post("/object/sign/hr/users/1/payroll.txt", json={"expires_in": 60}),
              st.put("/object/hr/users/1/payroll.txt", content=b"salary: 0"),
              st.delete("/object/hr/users/1/payroll.txt"), st.delete("/bucket/hr", params={"force": "true"})):
        assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN", (r.request.url, r.text)
    assert builder.get("/object/hr/users/1/payroll.txt").content == b"salary: 1"  # not overwritten
    # nor through a file cell, which would read back as a signed URL
    api = httpx.Client(base_url=f"{ws.base_url}/functions/v1/rest-api", headers={"Authorization": f"Bearer {token}"})
    ws.clients.append(api)
    r = api.post(f"/tables/{table['id']}/records",
                 json={"fields": {"Files": [{"bucket": "hr", "path": "users/1/payroll.txt"}]}})
    assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN", r.text
    # a read grant: list, read and sign, still no write
    admin.put(f"/workspaces/{ws.id}/profiles/{profile['id']}/bucket_grants", json=[{"bucket": "hr", "read": True}])
    assert [b["name"] for b in st.get("/bucket").json()] == ["hr"]
    assert st.get("/object/hr/users/1/payroll.txt").content == b"salary: 1"
    signed = st.post("/object/sign/hr/users/1/payroll.txt", json={"expires_in": 60})
    assert signed.status_code == 200 and httpx.get(signed.json()["signed_url"]).content == b"salary: 1"
    assert st.put("/object/hr/users/1/payroll.txt", content=b"salary: 0").status_code == 403
    # a bucket the token creates is its own
    assert st.post("/bucket", json={"name": "mine"}).status_code == 201
    assert st.post("/object/mine/a.txt", content=b"a").status_code == 201 and st.get("/object/mine/a.txt").content == b"a"


def test_app_users_reach_only_their_own_prefix_unless_the_relay_grant_says_all_paths(ws, admin):
    builder = _storage(ws, ws.builder_token)
    assert builder.post("/bucket", json={"name": "files"}).status_code == 201
    notes = ws.create_table("Notes", [{"name": "Title", "type": "text"}])
    relay = ws.profile([{"table_id": notes["id"], "read": True}], name="relay")
    assert admin.patch(f"/workspaces/{ws.id}", json={"relay_profile_id": relay["id"]}).status_code == 200
    alice, bob = _signup(ws), _signup(ws)
    a, b = alice["user"]["id"], bob["user"]["id"]
    assert builder.post(f"/object/files/users/{b}/payroll.txt", content=b"bob's pay").status_code == 201
    st = _storage(ws, alice["access_token"])
    # no relay grant on the bucket: nothing at all
    assert st.get(f"/object/files/users/{a}/x.txt").json()["code"] == "FORBIDDEN"
    assert st.post(f"/object/files/users/{a}/x.txt", content=b"x").json()["code"] == "FORBIDDEN"
    admin.put(f"/workspaces/{ws.id}/profiles/{relay['id']}/bucket_grants",
              json=[{"bucket": "files", "read": True, "write": True}])
    assert st.post(f"/object/files/users/{a}/notes.txt", content=b"mine").status_code == 201
    assert st.get(f"/object/files/users/{a}/notes.txt").content == b"mine"
    for r in (st.get(f"/object/files/users/{b}/payroll.txt"),
              st.post(f"/object/sign/files/users/{b}/payroll.txt", json={"expires_in": 60}),
              st.get("/object/list/files", params={"prefix": f"users/{b}/"}),
              st.put(f"/object/files/users/{b}/payroll.txt", content=b"0"),
              st.delete(f"/object/files/users/{b}/payroll.txt")):
        assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN", (r.request.url, r.text)
    # a listing without a prefix shows the user's own objects only
    assert [o["path"] for o in st.get("/object/list/files").json()["objects"]] == [f"users/{a}/notes.txt"]
    # the workspace may open every path to app users
    admin.put(f"/workspaces/{ws.id}/profiles/{relay['id']}/bucket_grants",
              json=[{"bucket": "files", "read": True, "all_paths": True}])
    assert st.get(f"/object/files/users/{b}/payroll.txt").content == b"bob's pay"
    assert st.post(f"/object/files/users/{a}/more.txt", content=b"m").json()["code"] == "FORBIDDEN"  # no write now


def test_public_buckets_stay_public_and_readable_by_every_token(ws):
    builder = _storage(ws, ws.builder_token)
    bucket = builder.post("/bucket", json={"name": "site", "public": True}).json()
    assert builder.post("/object/site/logo.png", content=b"\x89PNG\r\n\x1a\n").status_code == 201
    assert httpx.get(f"{ws.base_url}/storage/v1/object/public/{bucket['id']}/logo.png").status_code == 200
    st = _storage(ws, ws.token("rest_api")["token"])
    assert st.get("/object/site/logo.png").status_code == 200
    assert st.put("/object/site/logo.png", content=b"defaced").json()["code"] == "FORBIDDEN"


def test_the_builder_grants_buckets_through_mcp(ws, base_url):
    builder = _storage(ws, ws.builder_token)
    assert builder.post("/bucket", json={"name": "media"}).status_code == 201
    assert builder.post("/object/media/a.txt", content=b"a").status_code == 201
    profile = ws.profile([])
    st = _storage(ws, ws.token("rest_api", profile_id=profile["id"])["token"])
    assert st.get("/object/media/a.txt").status_code == 403
    granted = call_tool_sync(base_url, ws.builder_token, "grant_bucket_access",
                             {"profile_id": profile["id"], "bucket": "media", "write": True})
    assert granted | {"bucket_id": 0} == {"profile_id": profile["id"], "bucket_id": 0, "read": True, "write": True,
                                          "all_paths": False}
    listed = call_tool_sync(base_url, ws.builder_token, "list_access_profiles", {})["profiles"]
    assert [p["bucket_grants"] for p in listed if p["id"] == profile["id"]] == [
        [{"bucket_id": granted["bucket_id"], "read": True, "write": True, "all_paths": False}]]
    assert st.get("/object/media/a.txt").content == b"a"
    assert st.put("/object/media/a.txt", content=b"b").status_code == 200
    # all false removes the grant
    call_tool_sync(base_url, ws.builder_token, "grant_bucket_access",
                   {"profile_id": profile["id"], "bucket": "media", "read": False})
    assert st.get("/object/media/a.txt").status_code == 403
