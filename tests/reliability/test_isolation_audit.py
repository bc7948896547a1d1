"""Tenant isolation audit: workspace B tries every door to workspace A's data.

A holds a table with secret values (and a column whose very name is secret), a view
(published, with that column hidden), a schedule, a run, an agent with a channel, a
private bucket with an object, and an app user. B — with its builder token, a rest_api
token and A's ids, names and physical names — probes REST, filters and embedding, SQL,
every MCP tool, agents (chat), realtime, storage and signed URLs, pipeline steps,
semantic search and publishing. Every probe must answer with the right refusal and a
body that contains none of A's secrets; at the end A's data is unchanged.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from websockets.sync.client import connect as ws_connect

from tests.mcp.conftest import call_tool_sync, connect

SECRET = f"a-secret-{secrets.token_hex(6)}"  # a value in A's records
HIDDEN = f"HiddenCol{secrets.token_hex(4)}"  # the name of A's hidden column (never sent by B)
HIDDEN_VALUE = f"a-hidden-{secrets.token_hex(6)}"
OBJECT_BYTES = f"a-object-{secrets.token_hex(6)}".encode()
PASSWORD = "correct horse battery"
REFUSED = {400, 401, 403, 404}


@dataclass
class Tenant:
    id: int
    token: str  # builder (vibe_mcp)
    rest_token: str
    rest: httpx.Client
    storage: httpx.Client
    ids: dict[str, Any]


def _tenant(admin: httpx.Client, base_url: str, name: str) -> Tenant:
    ws = admin.post("/workspaces", json={"name": name, "plan": "pro"}).json()
    token = admin.post(f"/workspaces/{ws['id']}/tokens", json={"type": "vibe_mcp", "name": "b"}).json()["token"]
    rest_token = admin.post(f"/workspaces/{ws['id']}/tokens", json={"type": "rest_api", "name": "r"}).json()["token"]
    auth = {"Authorization": f"Bearer {token}"}
    return Tenant(ws["id"], token, rest_token,
                  httpx.Client(base_url=f"{base_url}/functions/v1/rest-api", headers=auth, timeout=60),
                  httpx.Client(base_url=f"{base_url}/storage/v1", headers=auth, timeout=60), {})


def _ok(r: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert r.status_code == status, r.text
    return r.json()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def tenants(admin: httpx.Client, base_url: str) -> Iterator[tuple[Tenant, Tenant]]:
    a = _tenant(admin, base_url, f"iso-a-{secrets.token_hex(3)}")
    b = _tenant(admin, base_url, f"iso-b-{secrets.token_hex(3)}")
    name = f"Alpha{secrets.token_hex(4)}"
    other = _ok(a.rest.post("/tables", json={"name": f"{name}Other", "columns": [{"name": "X", "type": "text"}]}), 201)
    t = _ok(a.rest.post("/tables", json={"name": name, "columns": [
        {"name": "Secret", "type": "text"}, {"name": HIDDEN, "type": "text"}, {"name": "N", "type": "number"},
        {"name": "Link", "type": "relation", "relation_table_id": other["id"]},
        {"name": "Echo", "type": "formula", "formula": "{Secret} & \"!\""},
    ]}), 201)
    rec = _ok(a.rest.post(f"/tables/{t['id']}/records",
                          json={"fields": {"Secret": SECRET, HIDDEN: HIDDEN_VALUE, "N": 7}}), 201)
    view = _ok(a.rest.post(f"/tables/{t['id']}/views", json={
        "name": "Pub", "view_type": "grid", "config": {"hidden_columns": [HIDDEN]}}), 201)
    pub = call_tool_sync(base_url, a.token, "publish_view", {"table_id": t["id"], "view_id": view["id"]})
    sched = _ok(a.rest.post(f"/tables/{t['id']}/schedules", json={
        "name": "hourly", "interval_seconds": 3600, "paused": True}), 201)
    run = _ok(a.rest.post(f"/tables/{t['id']}/run-actions", json={"record_ids": [rec["id"]]}), 202)
    agent = _ok(a.rest.post("/agents", json={"name": "A-agent", "table_ids": [t["id"]]}), 201)
    channel = _ok(a.rest.post(f"/agents/{agent['id']}/channels", json={"type": "web"}), 201)
    bucket_name = f"abkt{secrets.token_hex(3)}"
    bucket = _ok(a.storage.post("/bucket", json={"name": bucket_name, "public": False}), 201)
    _ok(a.storage.post(f"/object/{bucket_name}/docs/secret.txt", content=OBJECT_BYTES,
                       headers={"Content-Type": "text/plain"}), 201)
    signed = _ok(a.storage.post(f"/object/sign/{bucket_name}/docs/secret.txt", json={"expires_in": 600}))
    profile = _ok(admin.post(f"/workspaces/{a.id}/profiles", json={
        "name": "relay", "grants": [{"table_id": t["id"], "read": True}]}), 201)
    _ok(admin.patch(f"/workspaces/{a.id}", json={"relay_profile_id": profile["id"]}))
    with httpx.Client(base_url=f"{base_url}/functions/v1/auth", timeout=60) as auth:
        session = _ok(auth.post("/signup", json={"workspace_id": a.id, "email": f"u{secrets.token_hex(3)}@example.com",
                                                  "password": PASSWORD}), 201)
    a.ids.update(table=t["id"], name=name, other=other["id"], columns={c["name"]: c["id"] for c in t["columns"]},
                 record=rec["id"], view=view["id"], share_url=pub["url"], schedule=sched["id"],
                 run=run["run_id"], agent=agent["id"], channel=channel["id"], bucket=bucket["id"],
                 bucket_name=bucket_name, signed_url=signed["signed_url"], app_token=session["access_token"])
    bt = _ok(b.rest.post("/tables", json={"name": "Beta", "columns": [{"name": "Name", "type": "text"}]}), 201)
    _ok(b.rest.post(f"/tables/{bt['id']}/records", json={"fields": {"Name": "b-row"}}), 201)
    b_bucket = _ok(b.storage.post("/bucket", json={"name": f"bbkt{secrets.token_hex(3)}"}), 201)
    b_profile = _ok(admin.post(f"/workspaces/{b.id}/profiles", json={"name": "all", "grants": [
        {"table_id": bt["id"], "read": True, "create": True, "update": True, "delete": True}]}), 201)
    user_mcp = _ok(admin.post(f"/workspaces/{b.id}/tokens", json={
        "type": "user_mcp", "name": "u", "profile_id": b_profile["id"]}), 201)["token"]
    b.ids.update(table=bt["id"], bucket=b_bucket["id"], bucket_name=b_bucket["name"], user_mcp=user_mcp)
    try:
        yield a, b
    finally:
        for tenant in (a, b):
            tenant.rest.close()
            tenant.storage.close()


def clean(body: str | bytes, *, names: bool = True) -> bool:
    """Nothing of A's secrets in a response body (``names``: nor the hidden column's name,
    for probes that did not send that name themselves; an error may echo the input)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    secrets_ = (SECRET, HIDDEN_VALUE, OBJECT_BYTES.decode()) + ((HIDDEN,) if names else ())
    return not any(s in text for s in secrets_)


def refused(r: httpx.Response, *statuses: int, names: bool = True) -> None:
    assert r.status_code in (statuses or REFUSED), f"{r.request.method} {r.request.url} → {r.status_code} {r.text[:300]}"
    assert clean(r.content, names=names), f"{r.request.method} {r.request.url} leaked: {r.text[:300]}"
    if r.headers.get("content-type", "").startswith("application/json"):
        assert set(r.json()) >= {"error", "code"}


def a_unchanged(a: Tenant) -> None:
    got = _ok(a.rest.get(f"/tables/{a.ids['table']}/records/{a.ids['record']}"))
    assert got["fields"]["Secret"] == SECRET and got["fields"][HIDDEN] == HIDDEN_VALUE
    listed = _ok(a.rest.get(f"/tables/{a.ids['table']}/records", headers={"Prefer": "count=exact"}))
    assert [r["id"] for r in listed["records"]] == [a.ids["record"]]
    table = _ok(a.rest.get(f"/tables/{a.ids['table']}"))
    assert table["name"] == a.ids["name"] and {c["name"] for c in table["columns"]} >= {"Secret", HIDDEN}


# ---------------------------------------------------------------- REST ids and names

def test_rest_ids_of_a_are_not_found_for_b(tenants):
    a, b = tenants
    t, rid, col = a.ids["table"], a.ids["record"], a.ids["columns"]["Secret"]
    for ref in (t, a.ids["name"]):  # REST paths take integer ids: a name is a 400
        refused(b.rest.get(f"/tables/{ref}"), 400, 404)
        refused(b.rest.patch(f"/tables/{ref}", json={"name": "pwned"}), 400, 404)
        refused(b.rest.get(f"/tables/{ref}/columns"), 400, 404)
        refused(b.rest.get(f"/tables/{ref}/records"), 400, 404)
        refused(b.rest.get(f"/tables/{ref}/records", params={"Secret": f"eq.{SECRET}"}), 400, 404)
        refused(b.rest.post(f"/tables/{ref}/records", json={"fields": {"Secret": "x"}}), 400, 404)
        refused(b.rest.post(f"/tables/{ref}/records/batch", json={"rows": [{"Secret": "x"}]}), 400, 404)
    probes = [
        ("GET", f"/tables/{t}/columns/{col}", None), ("PATCH", f"/tables/{t}/columns/{col}", {"name": "x"}),
        ("DELETE", f"/tables/{t}/columns/{col}", None),
        ("GET", f"/tables/{t}/records/{rid}", None), ("PATCH", f"/tables/{t}/records/{rid}", {"fields": {"N": 1}}),
        ("DELETE", f"/tables/{t}/records/{rid}", None), ("POST", f"/tables/{t}/records/{rid}/run", {}),
        ("POST", f"/tables/{t}/records/{rid}/compute/Echo", None),
        ("POST", f"/tables/{t}/run-actions", {"record_ids": [rid]}), ("GET", f"/runs/{a.ids['run']}", None),
        ("GET", f"/tables/{t}/views", None), ("GET", f"/tables/{t}/views/{a.ids['view']}", None),
        ("PATCH", f"/tables/{t}/views/{a.ids['view']}", {"name": "x"}),
        ("DELETE", f"/tables/{t}/views/{a.ids['view']}", None),
        ("GET", f"/tables/{t}/schedules", None), ("GET", f"/tables/{t}/schedules/{a.ids['schedule']}", None),
        ("PATCH", f"/tables/{t}/schedules/{a.ids['schedule']}", {"name": "x"}),
        ("POST", f"/tables/{t}/schedules/{a.ids['schedule']}/trigger", None),
        ("DELETE", f"/tables/{t}/schedules/{a.ids['schedule']}", None),
        ("GET", f"/agents/{a.ids['agent']}", None), ("PATCH", f"/agents/{a.ids['agent']}", {"name": "x"}),
        ("DELETE", f"/agents/{a.ids['agent']}/channels/{a.ids['channel']}", None),
        ("DELETE", f"/agents/{a.ids['agent']}", None),
        ("POST", f"/tables/{t}/search", {"query": SECRET}),
        ("DELETE", f"/tables/{t}", None),
    ]
    rest_api = httpx.Client(base_url=b.rest.base_url, timeout=60, headers={"Authorization": f"Bearer {b.rest_token}"})
    with rest_api:
        for client, codes in ((b.rest, (404,)), (rest_api, (403, 404))):  # rest_api: builder-only routes are 403
            for method, url, body in probes:
                refused(client.request(method, url, json=body), *codes)
    # A's ids on B's own table: B's data or a 404, never A's
    bt = b.ids["table"]
    for url in (f"/tables/{bt}/records/{rid}", f"/tables/{bt}/views/{a.ids['view']}",
                f"/tables/{bt}/schedules/{a.ids['schedule']}", f"/tables/{bt}/columns/{col}"):
        r = b.rest.get(url)
        assert clean(r.content) and r.status_code in (200, 404), r.text
    refused(b.rest.get(f"/tables/{bt}/records", params={"view": a.ids["view"]}), 404)
    listing = _ok(b.rest.get("/tables")), _ok(b.rest.get("/schema")), _ok(b.rest.get("/agents"))
    assert clean(json.dumps(listing)) and a.ids["name"] not in json.dumps(listing)
    a_unchanged(a)


# ---------------------------------------------------------------- filters, embedding, relations

def test_relations_filters_and_embedding_cannot_reach_a(tenants):
    a, b = tenants
    bt = b.ids["table"]
    for ref in (a.ids["table"], a.ids["name"]):
        refused(b.rest.post(f"/tables/{bt}/columns", json={"name": "ToA", "type": "relation", "relation_table_id": ref}),
                400, 404)
        refused(b.rest.post("/tables", json={"name": f"Rel{secrets.token_hex(2)}", "columns": [
            {"name": "ToA", "type": "relation", "relation_table_id": ref}]}), 400, 404)
    for params in ({HIDDEN: "is.null"}, {"Secret": f"eq.{SECRET}"}, {"select": f"Name,Link({HIDDEN})"},
                   {"select": "Name,Link(*)"}, {"expand": "Link"}, {"order": f"{HIDDEN}.desc"},
                   {f"filter[{HIDDEN}][eq]": SECRET}, {"Link.Secret": f"eq.{SECRET}"}):
        refused(b.rest.get(f"/tables/{bt}/records", params=params), 400, names=False)
    # B's own relation column, pointed at B's table: embedding only ever sees B
    col = _ok(b.rest.post(f"/tables/{bt}/columns", json={"name": "Self", "type": "relation", "relation_table_id": bt}),
              201)
    refused(b.rest.patch(f"/tables/{bt}/columns/{col['id']}", json={"relation_table_id": a.ids["table"]}), 400, 404)
    r = b.rest.get(f"/tables/{bt}/records", params={"select": "Name,Self(*)"})
    assert r.status_code == 200 and clean(r.content)


# ---------------------------------------------------------------- SQL

def test_sql_cannot_name_or_reach_a_tables(tenants):
    a, b = tenants
    ws, t = a.id, a.ids["table"]
    hidden_col = a.ids["columns"][HIDDEN]
    queries = [
        f'SELECT * FROM "{a.ids["name"]}"',
        f"SELECT * FROM ws_{ws}.t_{t}",
        f'SELECT * FROM "ws_{ws}"."t_{t}"',
        f"SELECT c_{hidden_col} FROM ws_{ws}.t_{t}",
        f"SELECT * FROM Beta JOIN ws_{ws}.t_{t} ON true",
        f"SELECT (SELECT count(*) FROM ws_{ws}.t_{t}) AS n FROM Beta",
        f"WITH x AS (SELECT * FROM ws_{ws}.t_{t}) SELECT * FROM x",
        f"SELECT * FROM Beta UNION SELECT c_{hidden_col} FROM ws_{ws}.t_{t}",
        "SELECT relname FROM pg_catalog.pg_class",
        "SELECT * FROM pg_tables",
        "SELECT nspname FROM pg_namespace",
        "SELECT * FROM information_schema.tables",
        "SELECT column_name FROM information_schema.columns",
        "SELECT query FROM pg_stat_activity",
        "SELECT * FROM wds.tables",
        "SELECT * FROM wds.columns",
        "SELECT * FROM wds.tokens",
        f"SELECT query_to_xml('select * from ws_{ws}.t_{t}', true, true, '')",
        f"SELECT pg_catalog.query_to_json('select * from ws_{ws}.t_{t}')",
        "SELECT pg_read_file('/etc/passwd')",
        "SELECT current_setting('search_path')",
        f"SELECT * FROM Beta; SELECT * FROM ws_{ws}.t_{t}",
        f"SET search_path TO ws_{ws}",
        f"SELECT * FROM t_{t}",
    ]
    for q in queries:
        r = b.rest.post("/sql", json={"query": q})
        assert clean(r.content), (q, r.text[:300])  # an error may echo the query, never A's data
        assert r.status_code in (200, 400, 403, 404, 408), (q, r.status_code, r.text[:300])
        if r.status_code == 200:  # a catalog query that ran must not list A's schema or tables
            assert f"ws_{ws}" not in r.text and a.ids["name"] not in r.text, (q, r.text[:300])
    a_unchanged(a)


# ---------------------------------------------------------------- MCP: every tool with A's ids and names

def _args_for(schema: dict[str, Any], a: Tenant, by_name: bool) -> dict[str, Any]:
    """Arguments for a tool: A's ids (or names) where a parameter names one, harmless
    values of the declared type elsewhere."""
    ids = a.ids
    known: dict[str, Any] = {
        "table_id": ids["name"] if by_name else ids["table"], "table": ids["name"] if by_name else ids["table"],
        "table_ids": [ids["table"]], "record_id": ids["record"], "record_ids": [ids["record"]],
        "view_id": ids["view"], "column_id": ids["columns"]["Secret"], "column": "Secret",
        "column_ids": [ids["columns"]["Secret"]], "agent_id": ids["agent"], "channel_id": ids["channel"],
        "schedule_id": ids["schedule"], "run_id": ids["run"], "bucket": ids["bucket"], "bucket_id": ids["bucket"],
        "path": "docs/secret.txt", "relation_table_id": ids["table"], "fields": {"Secret": "x"},
        "filters": {"Secret": "is.null"}, "query": f'SELECT * FROM "{ids["name"]}"',
        "sql": f"SELECT * FROM ws_{a.id}.t_{ids['table']}", "profile_id": 1, "workspace_id": a.id,
        # valid shapes, so that the call gets past validation to the lookup
        "columns": ["Secret"], "view_type": "grid", "rows": [{"Secret": "x"}], "enabled": True,
    }
    props = schema.get("properties") or {}
    out: dict[str, Any] = {}
    for name, spec in props.items():
        if name in known:
            out[name] = known[name]
        elif name in (schema.get("required") or []):
            kind = spec.get("type") if isinstance(spec, dict) else None
            kind = kind[0] if isinstance(kind, list) else kind
            out[name] = {"string": "x", "integer": ids["table"], "number": 1, "boolean": False,
                         "array": [], "object": {}}.get(kind, "x")
    return out


def test_every_mcp_tool_refuses_a_ids_and_names(tenants, base_url):
    a, b = tenants

    async def probe(token: str) -> list[str]:
        problems: list[str] = []
        async with connect(base_url, token) as client:
            tools = (await client.list_tools()).tools
            assert len(tools) > 10
            for tool in tools:
                for by_name in (False, True):
                    args = _args_for(tool.input_schema, a, by_name)  # type: ignore[attr-defined]
                    result = await client.call_tool(tool.name, args)
                    text = "".join(getattr(c, "text", "") for c in result.content)
                    if not clean(text + json.dumps(result.structured_content or {}, default=str)):
                        problems.append(f"{tool.name}({args}) leaked: {text[:200]}")
        return problems

    for token in (b.token, b.ids["user_mcp"]):  # builder tools, and data tools with full grants on B
        problems = asyncio.run(probe(token))
        assert not problems, "\n".join(problems)
    a_unchanged(a)


# ---------------------------------------------------------------- agents (chat tools)

def test_an_agent_of_b_cannot_be_given_a_tables(tenants):
    a, b = tenants
    refused(b.rest.post("/agents", json={"name": "spy", "table_ids": [a.ids["table"]]}), 400, 404)
    mine = _ok(b.rest.post("/agents", json={"name": "mine", "table_ids": [b.ids["table"]]}), 201)
    refused(b.rest.patch(f"/agents/{mine['id']}", json={"table_ids": [a.ids["table"]]}), 400, 404)
    assert _ok(b.rest.get(f"/agents/{mine['id']}"))["table_ids"] == [b.ids["table"]]
    # A's channel/agent ids on B's chat door: refused, nothing of A
    r = httpx.post(f"{base(b)}/functions/v1/agent-webhook", headers={"Authorization": f"Bearer {b.token}"},
                   json={"agent_id": a.ids["agent"], "message": f"show me {a.ids['name']}"}, timeout=60)
    assert r.status_code in (400, 401, 403, 404, 501, 503) and clean(r.content), r.text[:300]


def base(t: Tenant) -> str:
    return str(t.rest.base_url).split("/functions/v1")[0]


# ---------------------------------------------------------------- realtime

def _ws_recv(conn: Any, timeout: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            msg = json.loads(conn.recv(timeout=left))
        except TimeoutError:
            return None
        if msg.get("type") != "heartbeat":
            return msg


def test_realtime_refuses_a_tables_and_delivers_nothing_of_a(tenants, base_url):
    a, b = tenants
    url = base_url.replace("http://", "ws://") + "/realtime/v1?token="
    with ws_connect(url + b.token, open_timeout=10) as conn:
        for ref in (a.ids["table"], a.ids["name"], str(a.ids["table"])):
            conn.send(json.dumps({"type": "subscribe", "table": ref}))
            msg = _ws_recv(conn, 10)
            assert msg is not None and msg["type"] == "error" and msg["code"] in ("NOT_FOUND", "FORBIDDEN"), msg
        conn.send(json.dumps({"type": "subscribe", "table": b.ids["table"]}))
        assert (_ws_recv(conn, 10) or {}).get("type") == "subscribed"
        _ok(a.rest.patch(f"/tables/{a.ids['table']}/records/{a.ids['record']}", json={"fields": {"N": 8}}))
        _ok(a.rest.post(f"/tables/{a.ids['table']}/records", json={"fields": {"Secret": SECRET}}), 201)
        _ok(b.rest.post(f"/tables/{b.ids['table']}/records", json={"fields": {"Name": "marker"}}), 201)
        # B's own change arrives; nothing of A arrives before it or after it
        seen = []
        while (msg := _ws_recv(conn, 5)) is not None:
            seen.append(msg)
            if msg.get("type") == "change" and msg["record"]["fields"].get("Name") == "marker":
                break
        assert seen and seen[-1]["record"]["fields"]["Name"] == "marker", seen
        assert all(m["table_id"] == b.ids["table"] for m in seen if m["type"] == "change")
        assert clean(json.dumps(seen))
    # A's app user on the realtime door: A's data only, never B's table
    with ws_connect(url + a.ids["app_token"], open_timeout=10) as conn:
        conn.send(json.dumps({"type": "subscribe", "table": b.ids["table"]}))
        msg = _ws_recv(conn, 10)
        assert msg is not None and msg["type"] == "error", msg
    # cleanup: A's extra record (a_unchanged counts records)
    extra = [r["id"] for r in _ok(a.rest.get(f"/tables/{a.ids['table']}/records"))["records"]
             if r["id"] != a.ids["record"]]
    for rid in extra:
        _ok(a.rest.delete(f"/tables/{a.ids['table']}/records/{rid}"))


# ---------------------------------------------------------------- storage and signed URLs

def test_storage_paths_and_signed_urls_stay_in_their_workspace(tenants, base_url):
    a, b = tenants
    bid, bname, path = a.ids["bucket"], a.ids["bucket_name"], "docs/secret.txt"
    for ref in (bid, bname):
        refused(b.storage.get(f"/bucket/{ref}"), 404)
        refused(b.storage.get(f"/object/list/{ref}"), 404)
        refused(b.storage.get(f"/object/{ref}/{path}"), 404)
        refused(b.storage.post(f"/object/sign/{ref}/{path}", json={"expires_in": 60}), 404)
        refused(b.storage.post(f"/object/{ref}/{path}", content=b"overwrite", headers={"x-upsert": "true"}), 404)
        refused(b.storage.put(f"/object/{ref}/{path}", content=b"overwrite"), 404)
        refused(b.storage.delete(f"/object/{ref}/{path}"), 404)
        refused(b.storage.delete(f"/bucket/{ref}", params={"force": "true"}), 404)
    refused(httpx.get(f"{base_url}/storage/v1/object/public/{bid}/{path}"), 404)  # private bucket
    # traversal out of B's bucket, raw and encoded
    mine = b.ids["bucket_name"]
    for evil in (f"../{bname}/{path}", f"..%2F{bname}%2F{path}", f"%2E%2E/%2E%2E/{bid}/{path}",
                 f"x/../../{bname}/{path}", f"..\\{bname}\\{path}"):
        r = b.storage.get(f"{base_url}/storage/v1/object/{mine}/{evil}")
        assert r.status_code in (400, 404) and clean(r.content), (evil, r.status_code, r.text[:200])
    # A's signed URL is a capability for exactly that object, with or without a token
    signed = a.ids["signed_url"]
    assert httpx.get(signed).content == OBJECT_BYTES
    assert httpx.get(signed, headers={"Authorization": f"Bearer {b.token}"}).content == OBJECT_BYTES
    parts = urlsplit(signed)
    for tampered in (parts.path.replace("secret.txt", "other.txt"), parts.path.replace(f"/{bid}/", f"/{b.ids['bucket']}/"),
                     parts.path.replace("docs/secret.txt", f"docs/%2E%2E/%2E%2E/{b.ids['bucket']}/x")):
        r = httpx.get(f"{base_url}{tampered}?{parts.query}")
        assert r.status_code in (400, 403, 404) and clean(r.content), (tampered, r.status_code)
    r = httpx.get(f"{base_url}{parts.path}?token=1.{'0' * 43}")
    assert r.status_code == 403 and clean(r.content)
    # and the object is intact
    assert _ok_bytes(a.storage.get(f"/object/{bname}/{path}")) == OBJECT_BYTES


def _ok_bytes(r: httpx.Response) -> bytes:
    assert r.status_code == 200, r.text
    return r.content


# ---------------------------------------------------------------- pipeline steps

@pytest.mark.parametrize("kind,config", [
    ("create_record", {"fields": {"Secret": "from-b"}}),
    ("update_record", {"record_id": "__RID__", "fields": {"N": 99}}),
    ("delete_record", {"record_id": "__RID__"}),
    ("fetch_records", {"filters": {}, "limit": 10}),
])
def test_pipeline_steps_of_b_cannot_touch_a_tables(tenants, kind, config):
    a, b = tenants
    for ref in (a.ids["table"], a.ids["name"]):
        cfg = json.loads(json.dumps({"table_id": ref, **config}).replace('"__RID__"', str(a.ids["record"])))
        t = b.rest.post("/tables", json={"name": f"Steps{secrets.token_hex(3)}", "columns": [
            {"name": "Name", "type": "text"}, {"name": "Step", "type": kind, "config": cfg}]})
        if t.status_code != 201:  # refused when the column is defined: fine
            refused(t, 400, 404)
            continue
        r = b.rest.post(f"/tables/{t.json()['id']}/records", json={"fields": {"Name": "go"}})
        assert r.status_code == 201 and clean(r.content), r.text[:300]
        assert r.json()["pipeline"]["status"] == "error" and "Step" in r.json()["pipeline"]["errors"]
    a_unchanged(a)


# ---------------------------------------------------------------- publishing

def test_a_published_view_shows_only_its_visible_columns(tenants, base_url):
    a, _ = tenants
    r = httpx.get(a.ids["share_url"])
    assert r.status_code == 200 and SECRET in r.text  # the visible column is public by design
    assert HIDDEN not in r.text and HIDDEN_VALUE not in r.text
    html = httpx.get(a.ids["share_url"], params={"format": "html"})
    assert html.status_code == 200 and HIDDEN_VALUE not in html.text and HIDDEN not in html.text
    share = urlsplit(a.ids["share_url"]).path.rsplit("/", 1)[-1]
    for guess in (str(a.ids["view"]), share[:-1], share + "x", f"../{share}"):
        r = httpx.get(f"{base_url}/p/{guess}")
        assert r.status_code == 404 and clean(r.content), guess
    # a form submission cannot be made against a grid share
    refused(httpx.post(a.ids["share_url"], json={"Secret": "x"}), 404, 400)


# ---------------------------------------------------------------- app users

def test_an_app_user_of_a_cannot_reach_b(tenants, base_url):
    a, b = tenants
    token = a.ids["app_token"]
    with httpx.Client(base_url=f"{base_url}/functions/v1/rest-api", timeout=60,
                      headers={"Authorization": f"Bearer {token}"}) as user:
        assert _ok(user.get(f"/tables/{a.ids['table']}/records"))["records"]  # its own relay grant works
        for url in (f"/tables/{b.ids['table']}", f"/tables/{b.ids['table']}/records", "/tables/Beta/records"):
            r = user.get(url)
            assert r.status_code in (400, 403, 404) and "b-row" not in r.text, (url, r.text[:200])
        r = user.post(f"/tables/{b.ids['table']}/records", json={"fields": {"Name": "x"}})
        assert r.status_code in (403, 404)
        r = user.post("/sql", json={"query": "SELECT * FROM Beta"})
        assert r.status_code in (400, 401, 403, 404) and "b-row" not in r.text
    with httpx.Client(base_url=f"{base_url}/storage/v1", timeout=60,
                      headers={"Authorization": f"Bearer {token}"}) as store:
        assert store.get(f"/bucket/{b.ids['bucket']}").status_code == 404
        assert store.get(f"/object/list/{b.ids['bucket_name']}").status_code == 404
    # and B's tokens do not work on A's auth endpoints as A's users
    with httpx.Client(base_url=f"{base_url}/functions/v1/auth", timeout=60) as auth:
        r = auth.get("/user", headers={"Authorization": f"Bearer {b.token}"})
        assert r.status_code == 401
