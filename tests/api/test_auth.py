"""Tokens: types and doors, per-table grants, expiry, rotation, revocation, isolation."""

from __future__ import annotations

import time

import httpx


def test_missing_or_malformed_or_unknown_token_is_401(ws, base_url):
    for headers in ({}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer"},
                    {"Authorization": "Bearer wds_rest_nope"}, {"Authorization": "Bearer " + "x" * 5000}):
        r = httpx.get(f"{base_url}/functions/v1/rest-api/tables", headers=headers)
        assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED", headers


def test_user_mcp_token_is_refused_on_rest(ws):
    tok = ws.token("user_mcp")
    r = ws.client(tok["token"]).get("/tables")
    assert r.status_code == 403 and r.json()["code"] == "WRONG_PROTOCOL"


def test_rest_token_gets_full_access_to_tables_it_creates(ws):
    tok = ws.token("rest_api")
    c = ws.client(tok["token"])
    assert c.get("/tables").json() == []
    t = ws.create_table("Mine", [{"name": "A", "type": "text"}], client=c)
    assert [x["id"] for x in c.get("/tables").json()] == [t["id"]]
    rec = c.post(f"/tables/{t['id']}/records", json={"fields": {"A": "x"}})
    assert rec.status_code == 201
    assert c.patch(f"/tables/{t['id']}/records/{rec.json()['id']}", json={"fields": {"A": "y"}}).status_code == 200
    assert c.post(f"/tables/{t['id']}/columns", json={"name": "B", "type": "number"}).status_code == 201
    assert c.delete(f"/tables/{t['id']}").status_code == 200


def test_grants_limit_each_action_per_table(ws):
    t = ws.create_table("Shared", [{"name": "A", "type": "text"}])
    hidden = ws.create_table("Hidden", [{"name": "A", "type": "text"}])
    rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": "x"}}).json()
    prof = ws.profile([{"table_id": t["id"], "read": True, "create": False, "update": True, "delete": False}])
    c = ws.client(ws.token("rest_api", profile_id=prof["id"])["token"])
    assert [x["id"] for x in c.get("/tables").json()] == [t["id"]]
    assert c.get(f"/tables/{t['id']}/records").status_code == 200
    assert c.patch(f"/tables/{t['id']}/records/{rec['id']}", json={"fields": {"A": "y"}}).status_code == 200
    for r in (c.post(f"/tables/{t['id']}/records", json={"fields": {"A": "z"}}),
              c.delete(f"/tables/{t['id']}/records/{rec['id']}"),
              c.get(f"/tables/{hidden['id']}/records"),
              c.post(f"/tables/{t['id']}/columns", json={"name": "B", "type": "text"}),
              c.delete(f"/tables/{t['id']}")):
        assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN", r.text


def test_grant_changes_take_effect_immediately(ws, admin):
    t = ws.create_table("G", [{"name": "A", "type": "text"}])
    prof = ws.profile([])
    c = ws.client(ws.token("rest_api", profile_id=prof["id"])["token"])
    assert c.get(f"/tables/{t['id']}/records").status_code == 403
    r = admin.put(f"/workspaces/{ws.id}/profiles/{prof['id']}/grants", json=[{"table_id": t["id"], "read": True}])
    assert r.status_code == 200
    assert c.get(f"/tables/{t['id']}/records").status_code == 200


def test_expired_token_is_401(ws, admin):
    tok = ws.token("rest_api", expires_in_seconds=1)
    c = ws.client(tok["token"])
    assert c.get("/tables").status_code == 200
    assert tok["expires_at"] is not None
    time.sleep(1.2)
    r = c.get("/tables")
    assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED"
    # rotating an expired token does not bring it back (it issued a working successor)
    r = admin.post(f"/workspaces/{ws.id}/tokens/{tok['id']}/rotate")
    assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND", r.text
    assert c.get("/tables").status_code == 401


def test_rotation_issues_a_new_secret_and_revokes_the_old(ws, admin):
    tok = ws.token("rest_api")
    old = ws.client(tok["token"])
    t = ws.create_table("R", client=old)
    r = admin.post(f"/workspaces/{ws.id}/tokens/{tok['id']}/rotate")
    assert r.status_code == 200
    new_secret = r.json()["token"]
    assert new_secret != tok["token"]
    assert old.get("/tables").status_code == 401
    new = ws.client(new_secret)
    assert [x["id"] for x in new.get("/tables").json()] == [t["id"]]  # keeps the tables it created


def test_revoked_token_is_401_at_once(ws, admin):
    tok = ws.token("rest_api")
    c = ws.client(tok["token"])
    assert c.get("/tables").status_code == 200
    assert admin.delete(f"/workspaces/{ws.id}/tokens/{tok['id']}").status_code == 200
    assert c.get("/tables").status_code == 401


def test_token_list_shows_metadata_never_secrets(ws, admin):
    tok = ws.token("rest_api")
    ws.client(tok["token"]).get("/tables")
    rows = admin.get(f"/workspaces/{ws.id}/tokens").json()
    assert tok["token"] not in str(rows)
    mine = next(r for r in rows if r["id"] == tok["id"])
    assert mine["prefix"] == tok["token"][:12] and "token" not in mine and "token_hash" not in mine


def test_a_workspace_never_sees_another_workspaces_data(make_workspace):
    a, b = make_workspace(), make_workspace()
    ta = a.create_table("Secret", [{"name": "A", "type": "text"}])
    rec = a.api.post(f"/tables/{ta['id']}/records", json={"fields": {"A": "classified"}}).json()
    col = ta["columns"][0]["id"]
    probes = [
        ("GET", f"/tables/{ta['id']}"), ("GET", f"/tables/{ta['id']}/columns"),
        ("GET", f"/tables/{ta['id']}/columns/{col}"), ("GET", f"/tables/{ta['id']}/records"),
        ("GET", f"/tables/{ta['id']}/records/{rec['id']}"), ("PATCH", f"/tables/{ta['id']}/records/{rec['id']}"),
        ("DELETE", f"/tables/{ta['id']}/records/{rec['id']}"), ("DELETE", f"/tables/{ta['id']}"),
        ("POST", f"/tables/{ta['id']}/records"), ("DELETE", f"/tables/{ta['id']}/columns/{col}"),
    ]
    for method, path in probes:
        r = b.api.request(method, path, json={"fields": {"A": "x"}} if method in ("POST", "PATCH") else None)
        assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND", (method, path, r.text)
        assert "classified" not in r.text
    assert all(t["id"] != ta["id"] for t in b.api.get("/tables").json())
    assert a.api.get(f"/tables/{ta['id']}/records/{rec['id']}").json()["fields"]["A"] == "classified"


def _missing_lookups(base_url: str) -> float:
    """The API's own count of token lookups that reached the database and found nothing."""
    text = httpx.get(f"{base_url}/metrics").text
    for line in text.splitlines():
        if line.startswith('wds_token_lookups_total{result="missing"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_flood_of_one_bad_token_costs_one_lookup(ws, base_url):
    import secrets

    bad = "wds_rest_" + secrets.token_hex(16)
    before = _missing_lookups(base_url)
    with httpx.Client(base_url=f"{base_url}/functions/v1/rest-api", headers={"Authorization": f"Bearer {bad}"}) as c:
        codes = {c.get("/tables").status_code for _ in range(20)}
    assert codes == {401}
    assert _missing_lookups(base_url) - before == 1  # 20 refusals, one query: the miss is cached
    # a token created right after a miss works at once (token changes drop cached misses)
    fresh = ws.client(ws.token("rest_api")["token"])
    assert fresh.get("/tables").status_code == 200


def test_cached_misses_are_bounded_and_dropped_on_token_changes():
    import asyncio

    from api.services import cache
    from storage.access import Principal, TokenType

    caches = cache.Caches()
    loads: list[str] = []
    valid: dict[str, Principal] = {}

    async def lookup(h: str):
        async def load():
            loads.append(h)
            return valid.get(h)
        return await caches.principal(h, load)

    async def scenario() -> None:
        assert await lookup("a") is None and await lookup("a") is None
        assert loads == ["a"]  # the second refusal came from the cache
        # the token appears (created, or its grant changed): the change notification
        # ("tokens", what Caches.apply receives from NOTIFY) drops the cached miss
        valid["a"] = Principal(token_id=1, workspace_id=1, type=TokenType.REST_API, profile_id=None,
                               plan="pro", read_only=False, expires_at=None)
        caches.apply("tokens")
        assert (await lookup("a")) is valid["a"] and loads == ["a", "a"]
        for i in range(cache.MISS_MAX + 50):  # distinct bad tokens: memory stays bounded
            await lookup(f"bad{i}")
        assert caches.cached_misses() == cache.MISS_MAX
        assert await lookup("bad0") is None and loads[-1] == "bad0"  # the oldest were evicted

    asyncio.run(scenario())
