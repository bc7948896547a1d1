"""App users against a hostile client (issue 22): sign-up fields, sign-in brute force in
parallel, sign-up floods.

Client IPs are told apart with ``X-Forwarded-For``: the test API's uvicorn trusts it from
127.0.0.1 (its ``--forwarded-allow-ips`` default), as the production API trusts its proxy.
"""

from __future__ import annotations

import secrets
import time
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


@pytest.fixture(scope="module")
def hashing_api(services: Services) -> Iterator[ApiProcess]:
    """One hashing thread (the old queue's worst case, made plain) and a 5 s wait for a
    workspace's hashing slot."""
    yield from running_api(services, name="api-hashing", WDS_PASSWORD_HASH_THREADS="1",
                           WDS_PASSWORD_HASH_WAIT_S="5")


def test_a_signin_flood_at_one_workspace_does_not_queue_another_workspaces_signins(make_workspace, admin,
                                                                                     hashing_api):
    """Unknown e-mails are hashed like known ones, and each is its own account window: a
    flood of them was limited by nothing but the hashing pool, whose queue every workspace
    of the process shares. Measured before the fix (2 threads, `wds dev`): 400 of them at
    one workspace made another workspace's sign-in wait 25.7 s (126 ms idle)."""
    flooded, bystander = make_workspace(), make_workspace()
    for w in (flooded, bystander):
        _enable(w, admin)
    email = f"b{secrets.token_hex(4)}@example.com"
    assert _signup(hashing_api.base_url, bystander.id, email=email, ip="10.6.0.1").status_code == 201

    def bystander_signin() -> float:
        started = time.perf_counter()
        r = _signin(hashing_api.base_url, bystander.id, email, PASSWORD, "10.6.0.2")
        assert r.status_code == 200, r.text
        return time.perf_counter() - started

    idle = min(bystander_signin() for _ in range(3))
    flood_n = 150

    def attack(i: int) -> httpx.Response:
        return _signin(hashing_api.base_url, flooded.id, f"nobody{i}-{secrets.token_hex(3)}@example.com",
                       "wrong password", f"10.5.{i // 200}.{i % 200}")

    with ThreadPoolExecutor(flood_n) as pool:
        started = time.perf_counter()
        flood = [pool.submit(attack, i) for i in range(flood_n)]
        time.sleep(0.5)  # the flood is queued
        during = [bystander_signin() for _ in range(3)]
        measured = time.perf_counter() - started
        answers = [f.result() for f in flood]
        elapsed = time.perf_counter() - started
    codes = Counter(r.status_code for r in answers)
    assert set(codes) <= {401, 503}, codes
    assert all(r.json()["code"] == "WORKSPACE_BUSY" and r.headers["retry-after"] == "1"
               for r in answers if r.status_code == 503)
    assert codes[503] > 0  # the flooded workspace's own queue is bounded (5 s here)
    assert measured < elapsed  # the bystander signed in while the flood was still answered
    # the bystander waited for at most a few hashes, not for the flood (before: for all of it)
    assert min(during) < max(1.5, 6 * idle), (during, idle, elapsed, codes)
