"""The examples of docs/api.md do what the page says, against the running service."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from tests.conftest import Workspace

API_MD = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def _tasks(ws: Workspace) -> int:
    r = ws.api.post("/tables", json={
        "name": "Tasks", "icon": "check",
        "columns": [
            {"name": "Title", "type": "text", "required": True},
            {"name": "Points", "type": "number"},
            {"name": "Due", "type": "date"},
            {"name": "Done", "type": "checkbox"},
            {"name": "Status", "type": "single_select", "options": [{"label": "todo", "color": "red"}, "done"]},
            {"name": "Score", "type": "formula", "formula": 'IF({Status} = "done", {Points} * 10, 0)'},
        ]})
    assert r.status_code == 201, r.text
    table = r.json()
    assert {"id", "name", "icon", "created_at", "updated_at", "columns"} <= set(table)
    return int(table["id"])


def test_the_examples_are_on_the_page():
    text = API_MD.read_text()
    for snippet in ('"name": "Tasks", "icon": "check"', "Points=gte.2&Status=in.(todo,done)",
                    "order=Due.asc.nullslast", '{"Points": 1}', "Idempotency-Key: 3f1c0a7e-create-42",
                    "SELECT Title, Score FROM Tasks WHERE Points >= 2"):
        assert snippet in text, snippet


def test_records_examples(ws: Workspace):
    t = _tasks(ws)
    api = ws.api
    key = {"Idempotency-Key": "3f1c0a7e-create-42"}
    body = {"fields": {"Title": "Ship it", "Points": 3, "Status": "done"}}
    first = api.post(f"/tables/{t}/records", json=body, headers=key)
    assert first.status_code == 201, first.text
    rec = first.json()
    assert rec["fields"]["Score"] == 30 and rec["pipeline"]["status"] == "ok"
    assert set(rec) >= {"id", "fields", "created_at", "updated_at", "pipeline"}
    # the same key and request: the first answer again, nothing written twice
    again = api.post(f"/tables/{t}/records", json=body, headers=key)
    assert again.status_code == 201 and again.json()["id"] == rec["id"]
    assert again.headers.get("Idempotent-Replayed") == "true"
    other = api.post(f"/tables/{t}/records", json={"fields": {"Title": "other"}}, headers=key)
    assert other.status_code == 409 and other.json()["code"] == "CONFLICT"

    # batch: a plain object row works, a row without the required Title fails alone
    batch = api.post(f"/tables/{t}/records/batch", json={
        "rows": [{"fields": {"Title": "a"}}, {"Title": "b"}, {"Points": 1}], "run_pipeline": True})
    assert batch.status_code == 200, batch.text
    results = batch.json()["results"]
    assert [r["index"] for r in results] == [0, 1, 2]
    assert results[0]["record"]["fields"]["Title"] == "a" and results[1]["record"]["fields"]["Title"] == "b"
    assert results[2]["code"] == "REQUIRED_FIELD" and "error" in results[2]

    # listing: filters, order with nulls last, paging and the count headers
    for i, pts in enumerate([2, 5, 7]):
        api.post(f"/tables/{t}/records", json={"fields": {"Title": f"t{i}", "Points": pts, "Status": "todo",
                                                           "Due": f"2026-01-0{i + 1}"}})
    r = api.get(f"/tables/{t}/records?Points=gte.2&Status=in.(todo,done)&order=Due.asc.nullslast&limit=2&offset=1",
                headers={"Prefer": "count=exact"})
    assert r.status_code == 200, r.text
    page = r.json()
    assert page["limit"] == 2 and page["offset"] == 1
    assert [x["fields"]["Title"] for x in page["records"]] == ["t1", "t2"]
    assert r.headers["X-Total-Count"] == "4" and r.headers["Content-Range"] == "1-2/4"
    empty = api.get(f"/tables/{t}/records?Points=gt.100", headers={"Prefer": "count=exact"})
    assert empty.headers["Content-Range"] == "*/0"
    assert api.get(f"/tables/{t}/records?Title=in.(\"a, b\",a)").json()["records"][0]["fields"]["Title"] == "a"
    # not.<op> is the complement, NULLs included: records without Points match not.gt.5
    negated = api.get(f"/tables/{t}/records?Points=not.gt.5").json()["records"]
    assert sorted(x["fields"]["Title"] for x in negated) == ["Ship it", "a", "b", "t0", "t1"]
    both = api.get(f"/tables/{t}/records?Points=gte.2&Points=lt.6&sort=-Points").json()["records"]
    assert [x["fields"]["Points"] for x in both] == [5, 3, 2]
    sel = api.get(f"/tables/{t}/records?select=Title,Points&Title=eq.t1").json()["records"][0]
    assert set(sel["fields"]) == {"Title", "Points"}
    bad_op = api.get(f"/tables/{t}/records?Points=about.3")
    assert bad_op.status_code == 400 and bad_op.json()["code"] == "UNKNOWN_OPERATOR"
    too_many = api.get(f"/tables/{t}/records?limit=1001")
    assert too_many.status_code == 400 and too_many.json()["code"] == "LIMIT_TOO_LARGE"

    # SQL, as in the example
    q = api.post("/sql", json={"query": "SELECT Title, Score FROM Tasks WHERE Points >= 2 AND Status = 'done' "
                                        "ORDER BY Score DESC LIMIT 20", "count": True})
    assert q.status_code == 200, q.text
    assert q.json() == {"rows": [{"Title": "Ship it", "Score": 30}], "total": 1, "table": "Tasks", "limit": 20,
                        "offset": 0, "has_more": False}

    # delete answers {id, deleted: true}
    d = api.delete(f"/tables/{t}/records/{rec['id']}")
    assert d.status_code == 200 and d.json()["id"] == rec["id"] and d.json()["deleted"] is True


def test_relation_select_and_expand_examples(ws: Workspace):
    api = ws.api
    people = api.post("/tables", json={"name": "People", "columns": [
        {"name": "Name", "type": "text"}, {"name": "Email", "type": "text"}]}).json()
    tasks = api.post("/tables", json={"name": "Jobs", "columns": [
        {"name": "Title", "type": "text"},
        {"name": "Owner", "type": "relation", "relation_table_id": people["id"]}]}).json()
    ada = api.post(f"/tables/{people['id']}/records", json={"fields": {"Name": "Ada", "Email": "ada@example.com"}}).json()
    api.post(f"/tables/{tasks['id']}/records", json={"fields": {"Title": "x", "Owner": ada["id"]}})
    plain = api.get(f"/tables/{tasks['id']}/records").json()["records"][0]
    assert plain["fields"]["Owner"] == ada["id"]
    picked = api.get(f"/tables/{tasks['id']}/records?select=Title,Owner(Name,Email)").json()["records"][0]
    assert picked["fields"]["Owner"]["fields"]["Name"] == "Ada" and picked["fields"]["Owner"]["fields"]["Email"] == "ada@example.com"
    every = api.get(f"/tables/{tasks['id']}/records?select=*,Owner(*)").json()["records"][0]
    assert every["fields"]["Title"] == "x" and every["fields"]["Owner"]["fields"]["Name"] == "Ada"
    expanded = api.get(f"/tables/{tasks['id']}/records?expand=Owner").json()["records"][0]
    assert expanded["fields"]["Owner"]["fields"]["Name"] == "Ada"


def test_documented_error_shapes(ws: Workspace):
    """errors.md: COLUMN_IN_USE lists dependents, CIRCULAR_REFERENCE the path, UNKNOWN_COLUMN
    the column; no token is 401 UNAUTHORIZED."""
    api = ws.api
    t = _tasks(ws)
    cols = {c["name"]: c["id"] for c in api.get(f"/tables/{t}/columns").json()}
    in_use = api.delete(f"/tables/{t}/columns/{cols['Points']}")
    assert in_use.status_code == 409 and in_use.json()["code"] == "COLUMN_IN_USE"
    assert any(d["name"] == "Score" for d in in_use.json()["dependents"])
    unknown = api.post(f"/tables/{t}/columns", json={"name": "X", "type": "formula", "formula": "{Nope} + 1"})
    assert unknown.status_code == 400 and unknown.json()["code"] == "UNKNOWN_COLUMN"
    assert unknown.json()["column"] == "Nope"
    a = api.post(f"/tables/{t}/columns", json={"name": "A", "type": "formula", "formula": "{Points} + 1"})
    assert a.status_code == 201, a.text
    cycle = api.patch(f"/tables/{t}/columns/{cols['Score']}", json={"formula": "{A} + 1"})
    assert cycle.status_code in (200, 400)
    if cycle.status_code == 200:  # Score → A is fine; A → Score closes the cycle
        cycle = api.patch(f"/tables/{t}/columns/{a.json()['id']}", json={"formula": "{Score} + 1"})
    assert cycle.status_code == 400 and cycle.json()["code"] == "CIRCULAR_REFERENCE"
    assert set(cycle.json()["path"]) >= {"A", "Score"}
    anon = httpx.get(f"{ws.base_url}/functions/v1/rest-api/tables", timeout=30)
    assert anon.status_code == 401 and anon.json()["code"] == "UNAUTHORIZED"
    assert re.fullmatch(r"[A-Z_]+", anon.json()["code"])


def _section(title: str) -> str:
    text = API_MD.read_text()
    start = text.index(f"\n## {title}\n")
    return text[start:text.index("\n## ", start + 1)]


def test_storage_examples(ws: Workspace, admin: httpx.Client):
    """The Storage section's curl lines, run as written (``$TOKEN`` the builder token): the
    public download took the bucket's name (``/public/avatars/ada.png``: 404), while the
    public URL takes its id, as the same section says."""
    section = _section("Storage")
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
    h = {"Authorization": f"Bearer {ws.builder_token}"}
    with httpx.Client(base_url=ws.base_url, timeout=30) as c:
        created = c.post("/storage/v1/bucket", headers=h, json={"name": "avatars", "public": True})
        assert created.status_code == 201 and created.json() == {"id": created.json()["id"], "name": "avatars",
                                                                 "public": True}, created.text
        assert '{"id": 1, "name": "avatars", "public": true}' in section
        up = c.post("/storage/v1/object/avatars/ada.png", headers={**h, "Content-Type": "image/png"}, content=png)
        assert up.status_code == 201, up.text
        public = re.search(r"curl -s \$BASE(/storage/v1/object/public/(\d+)/ada\.png) -o ada\.png", section)
        assert public is not None, "the public download example"
        bucket_id = created.json()["id"]
        got = c.get(public[1].replace(f"/public/{public[2]}/", f"/public/{bucket_id}/"))  # no token
        assert got.status_code == 200 and got.content == png
        assert "object/public/avatars" not in section
        assert c.get("/storage/v1/object/public/avatars/ada.png").status_code == 404  # names never work there
        signed = c.post("/storage/v1/object/sign/avatars/ada.png", headers=h, json={"expires_in": 3600})
        assert signed.status_code == 200 and set(signed.json()) == {"signed_url", "expires_at"}


def test_storage_access_is_by_grant_as_documented(ws: Workspace, admin: httpx.Client):
    """api.md said any REST credential "may list, download and sign"; a rest_api token
    without a bucket grant is 403, and so is an app user without one, even under its own
    users/<id>/ (security.md "Buckets obey grants"). The page says so now."""
    section = " ".join(_section("Storage").split())
    assert "may list, download and sign" not in section
    assert "answered `403 FORBIDDEN` without one" in section and "users/<its user id>/" in section
    h = {"Authorization": f"Bearer {ws.builder_token}"}
    with httpx.Client(base_url=f"{ws.base_url}/storage/v1", timeout=30) as c:
        assert c.post("/bucket", headers=h, json={"name": "private"}).status_code == 201
        assert c.post("/bucket", headers=h, json={"name": "open", "public": True}).status_code == 201
        assert c.post("/object/private/a.txt", headers=h, content=b"a").status_code == 201
        assert c.post("/object/open/a.txt", headers=h, content=b"a").status_code == 201
        other = {"Authorization": f"Bearer {ws.token('rest_api')['token']}"}
        for method, path in (("GET", "/object/private/a.txt"), ("GET", "/object/list/private"),
                             ("POST", "/object/sign/private/a.txt")):
            r = c.request(method, path, headers=other)
            assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN", (path, r.text)
        assert c.get("/object/open/a.txt", headers=other).status_code == 200  # public: readable by all
        assert c.post("/object/open/b.txt", headers=other, content=b"b").json()["code"] == "FORBIDDEN"
        # an app user of the workspace without a bucket grant: 403 under its own prefix too
        notes = ws.create_table("Notes", [{"name": "Title", "type": "text"}])
        relay = ws.profile([{"table_id": notes["id"], "read": True}], name="relay")
        assert admin.patch(f"/workspaces/{ws.id}", json={"relay_profile_id": relay["id"]}).status_code == 200
        session = httpx.post(f"{ws.base_url}/functions/v1/auth/signup", timeout=30, json={
            "workspace_id": ws.id, "email": "ada@example.com", "password": "correct horse battery"})
        assert session.status_code == 201, session.text
        user = {"Authorization": f"Bearer {session.json()['access_token']}"}
        own = f"users/{session.json()['user']['id']}/x.txt"
        assert c.post(f"/object/private/{own}", headers=user, content=b"x").json()["code"] == "FORBIDDEN"
        assert c.get(f"/object/list/private?prefix=users/{session.json()['user']['id']}/",
                     headers=user).json()["code"] == "FORBIDDEN"


def test_select_columns_do_not_take_ordering_operators(ws: Workspace):
    """The operator table said gt/gte/lt/lte compare "select by option order"; on a
    single_select they are 400 UNKNOWN_OPERATOR (sorting follows the options' order)."""
    text = " ".join(API_MD.read_text().split())
    assert "select by option order" not in text
    assert "`Stage=gt.lead` is `400 UNKNOWN_OPERATOR`" in text
    t = ws.create_table("Deals", [{"name": "Stage", "type": "single_select", "options": ["lead", "won"]}])
    for op in ("gt", "gte", "lt", "lte"):
        r = ws.api.get(f"/tables/{t['id']}/records", params={"Stage": f"{op}.lead"})
        assert r.status_code == 400 and r.json()["code"] == "UNKNOWN_OPERATOR", (op, r.text)
    assert ws.api.get(f"/tables/{t['id']}/records", params={"Stage": "in.(won)"}).status_code == 200
