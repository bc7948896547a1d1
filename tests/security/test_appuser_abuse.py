"""App users against a hostile client (issue 22): sign-up fields, sign-in brute force in
parallel, sign-up floods.

Client IPs are told apart with ``X-Forwarded-For``: the test API's uvicorn trusts it from
127.0.0.1 (its ``--forwarded-allow-ips`` default), as the production API trusts its proxy.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.conftest import ApiProcess, Services, running_api

PASSWORD = "correct horse battery"


@pytest.fixture(scope="module")
def signup_api(services: Services) -> Iterator[ApiProcess]:
    """An API process with the default sign-up window per IP and a small one per workspace
    (its windows are its own: the session API's sign-ups do not count here)."""
    yield from running_api(services, name="api-signups", WDS_SIGNUPS_PER_WORKSPACE="35/10 minutes")


def _enable(ws: Any, admin: httpx.Client) -> None:
    notes = ws.create_table("Notes", [{"name": "Title", "type": "text"}])
    profile = ws.profile([{"table_id": notes["id"], "read": True}], name="relay")
    assert admin.patch(f"/workspaces/{ws.id}", json={"relay_profile_id": profile["id"]}).status_code == 200


def _signup(base_url: str, ws_id: int, *, ip: str | None = None, email: str | None = None,
            **extra: Any) -> httpx.Response:
    headers = {"X-Forwarded-For": ip} if ip else {}
    return httpx.post(f"{base_url}/functions/v1/auth/signup", headers=headers, timeout=60, json={
        "workspace_id": ws_id, "email": email or f"u{secrets.token_hex(5)}@example.com", "password": PASSWORD,
        **extra})


def _signin(base_url: str, ws_id: int, email: str, password: str, ip: str) -> httpx.Response:
    return httpx.post(f"{base_url}/functions/v1/auth/token", headers={"X-Forwarded-For": ip}, timeout=60, json={
        "grant_type": "password", "workspace_id": ws_id, "email": email, "password": password})


def test_signup_fields_are_only_the_columns_the_workspace_lets_users_fill(ws, admin):
    _enable(ws, admin)
    users = ws.create_table("Users", [
        {"name": "Email", "type": "text"}, {"name": "Name", "type": "text"},
        {"name": "Role", "type": "text"}, {"name": "is_admin", "type": "checkbox"},
    ])
    r = _signup(ws.base_url, ws.id, fields={"Role": "admin", "is_admin": True})
    assert r.status_code == 400 and r.json()["code"] == "SIGNUP_FIELD_NOT_ALLOWED", r.text
    assert ws.api.get(f"/tables/{users['id']}/records").json()["records"] == []  # nothing was created
    # the workspace may open plain profile columns, never role or permission ones
    for bad in (["Role"], ["is_admin"], ["Email"], ["Name", "Name"], "Name"):
        r = admin.patch(f"/workspaces/{ws.id}", json={"signup_fields": bad})
        assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", bad
    assert admin.patch(f"/workspaces/{ws.id}", json={"signup_fields": ["Name"]}).json()["signup_fields"] == ["Name"]
    assert _signup(ws.base_url, ws.id, fields={"Name": "Eve", "Role": "admin"}).json()["code"] == \
        "SIGNUP_FIELD_NOT_ALLOWED"
    ok = _signup(ws.base_url, ws.id, fields={"Name": "Eve"})
    assert ok.status_code == 201, ok.text
    rows = ws.api.get(f"/tables/{users['id']}/records").json()["records"]
    assert [r["fields"].get("Name") for r in rows] == ["Eve"]
    assert rows[0]["fields"].get("Role") is None and not rows[0]["fields"].get("is_admin")


def test_parallel_wrong_passwords_take_five_tries_and_lock_no_other_account_behind_the_ip(ws, admin):
    _enable(ws, admin)
    victim, other = f"v{secrets.token_hex(4)}@example.com", f"o{secrets.token_hex(4)}@example.com"
    for email in (victim, other):
        assert _signup(ws.base_url, ws.id, email=email).status_code == 201
    ip = f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}.7"
    with ThreadPoolExecutor(50) as pool:
        codes = Counter(pool.map(
            lambda i: _signin(ws.base_url, ws.id, victim, f"wrong password {i}", ip).status_code, range(50)))
    assert codes == {401: 5, 429: 45}  # the limit holds under concurrency
    late = _signin(ws.base_url, ws.id, victim, PASSWORD, ip)
    assert late.status_code == 429 and late.json()["code"] == "AUTH_RATE_LIMIT" and int(late.headers["retry-after"]) > 0
    # the same IP signs into another account at once; the victim from elsewhere too
    assert _signin(ws.base_url, ws.id, other, PASSWORD, ip).status_code == 200
    assert _signin(ws.base_url, ws.id, victim, PASSWORD, "10.250.250.250").status_code == 200


def test_signups_are_throttled_per_ip_and_per_workspace(make_workspace, admin, signup_api):
    flooded, crowded = make_workspace(), make_workspace()
    for w in (flooded, crowded):
        _enable(w, admin)
    codes = [_signup(signup_api.base_url, flooded.id, ip="10.9.9.9").status_code for _ in range(100)]
    assert codes == [201] * 30 + [429] * 70  # WDS_SIGNUPS_PER_IP: 30 per 10 minutes by default
    refused = _signup(signup_api.base_url, flooded.id, ip="10.9.9.9")
    assert refused.json()["code"] == "SIGNUP_RATE_LIMIT" and int(refused.headers["retry-after"]) > 0
    # many IPs, one workspace: its own window (35 here) binds
    spread = [_signup(signup_api.base_url, crowded.id, ip=f"10.8.0.{i}").status_code for i in range(40)]
    assert spread == [201] * 35 + [429] * 5
    # another workspace and another IP are not affected
    assert _signup(signup_api.base_url, flooded.id, ip="10.7.7.7").status_code == 201
