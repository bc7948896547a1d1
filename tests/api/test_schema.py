"""``GET {rest}/schema``: the whole workspace as one token sees it, in one call."""

from __future__ import annotations

import pytest

FULL = {"read": True, "create": True, "update": True, "delete": True}
NONE = {"read": False, "create": False, "update": False, "delete": False}


SECRET = "s3cr3t-never-shown-4f9a"


@pytest.fixture
def tables(ws, admin):
    r = admin.post(f"/workspaces/{ws.id}/credentials", json={"name": "api-key", "type": "bearer", "secret": SECRET,
                                                                "hosts": ["example.com"]})
    assert r.status_code == 201, r.text
    people = ws.create_table("People", [{"name": "Email", "type": "text", "required": True}])
    tasks = ws.create_table("Tasks", [
        {"name": "Title", "type": "text", "required": True},
        {"name": "Score", "type": "number"},
        {"name": "Due", "type": "date"},
        {"name": "Done", "type": "checkbox"},
        {"name": "Status", "type": "single_select", "options": [{"label": "todo", "color": "red"}, "done"]},
        {"name": "Tags", "type": "multi_select", "options": ["a", "b"]},
        {"name": "Owner", "type": "relation", "relation_table_id": people["id"]},
        {"name": "Files", "type": "file"},
        {"name": "Double", "type": "formula", "formula": "{Score} * 2"},
        {"name": "Fetch", "type": "http_request",
         "config": {"method": "GET", "url": "https://example.com/{{ Title }}", "credential": "api-key"}},
    ])
    secret = ws.create_table("Secret", [{"name": "Code", "type": "text"}])
    return {"people": people, "tasks": tasks, "secret": secret}


def by_name(items):
    return {x["name"]: x for x in items}


def test_schema_lists_every_table_with_full_column_metadata(ws, tables):
    r = ws.api.get("/schema")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["workspace_id"] == ws.id and set(body) >= {"tables", "agents"}
    listed = by_name(body["tables"])
    assert set(listed) == {"People", "Tasks", "Secret"}
    tasks = listed["Tasks"]
    assert tasks["id"] == tables["tasks"]["id"] and tasks["access"] == FULL
    # each table as GET /tables/{id} shows it, plus the token's access
    assert {k: v for k, v in tasks.items() if k != "access"} == ws.api.get(f"/tables/{tasks['id']}").json()
    cols = by_name(tasks["columns"])
    assert [c["type"] for c in tasks["columns"]] == [
        "text", "number", "date", "checkbox", "single_select", "multi_select", "relation", "file",
        "formula", "http_request"]
    assert [o["label"] for o in cols["Status"]["options"]] == ["todo", "done"]
    assert cols["Status"]["options"][0]["color"] == "red" and all(o["id"] for o in cols["Status"]["options"])
    assert cols["Owner"]["relation_table"] == tables["people"]["id"]
    assert cols["Title"]["required"] is True and cols["Title"]["computed"] is False
    assert cols["Double"]["computed"] is True and cols["Double"]["formula"] == "{Score} * 2"
    assert cols["Fetch"]["computed"] is True
    # configs name credentials; they never hold a secret
    assert cols["Fetch"]["config"]["credential"] == "api-key"
    assert SECRET not in r.text and ws.builder_token not in r.text


def test_schema_shows_only_readable_tables_with_the_tokens_access(ws, tables):
    prof = ws.profile([
        {"table_id": tables["tasks"]["id"], "read": True, "create": True},
        {"table_id": tables["people"]["id"], "read": True},
    ])
    c = ws.client(ws.token("rest_api", profile_id=prof["id"])["token"])
    listed = by_name(c.get("/schema").json()["tables"])
    assert set(listed) == {"Tasks", "People"}
    assert listed["Tasks"]["access"] == {**NONE, "read": True, "create": True}
    assert listed["People"]["access"] == {**NONE, "read": True}
    # a table the token creates is fully its own
    mine = ws.create_table("Mine", client=c)
    listed = by_name(c.get("/schema").json()["tables"])
    assert listed["Mine"]["id"] == mine["id"] and listed["Mine"]["access"] == FULL


def test_schema_of_a_token_without_grants_is_empty(ws, tables):
    c = ws.client(ws.token("rest_api", profile_id=ws.profile([])["id"])["token"])
    r = c.get("/schema")
    assert r.status_code == 200 and r.json()["tables"] == []


def test_schema_follows_grant_changes(ws, tables, admin):
    prof = ws.profile([])
    c = ws.client(ws.token("rest_api", profile_id=prof["id"])["token"])
    assert c.get("/schema").json()["tables"] == []
    r = admin.put(f"/workspaces/{ws.id}/profiles/{prof['id']}/grants",
                  json=[{"table_id": tables["secret"]["id"], "read": True}])
    assert r.status_code == 200, r.text
    assert [t["name"] for t in c.get("/schema").json()["tables"]] == ["Secret"]


def test_schema_follows_schema_changes(ws, tables):
    tid = tables["secret"]["id"]
    assert ws.api.post(f"/tables/{tid}/columns", json={"name": "Added", "type": "number"}).status_code == 201
    assert ws.api.patch(f"/tables/{tid}", json={"name": "Renamed"}).status_code == 200
    listed = by_name(ws.api.get("/schema").json()["tables"])
    assert "Secret" not in listed and [c["name"] for c in listed["Renamed"]["columns"]] == ["Code", "Added"]
    assert ws.api.delete(f"/tables/{tid}").status_code == 200
    assert "Renamed" not in by_name(ws.api.get("/schema").json()["tables"])


def test_schema_never_shows_another_workspace(ws, tables, make_workspace):
    other = make_workspace()
    other.create_table("Elsewhere")
    other.api.post("/agents", json={"name": "Their agent"})
    body = ws.api.get("/schema").json()
    assert "Elsewhere" not in by_name(body["tables"]) and body["agents"] == []
    assert [t["name"] for t in other.api.get("/schema").json()["tables"]] == ["Elsewhere"]


def test_schema_lists_agents_and_their_web_channel_tokens(ws, tables):
    r = ws.api.post("/agents", json={"name": "Support", "model": "m", "table_ids": [tables["tasks"]["id"]]})
    assert r.status_code == 201, r.text
    agent = r.json()
    web = ws.api.post(f"/agents/{agent['id']}/channels", json={"type": "web"}).json()
    listed = ws.api.get("/schema").json()["agents"]
    assert len(listed) == 1
    a = listed[0]
    assert a["id"] == agent["id"] and a["name"] == "Support" and a["model"] == "m"
    assert a["table_ids"] == [tables["tasks"]["id"]]
    assert {"id": web["id"], "type": "web", "token": web["token"], "enabled": True,
            "config": {"credential": None}} in a["channels"]
    # agents are the builder's: another REST token sees none (nor their channel tokens)
    c = ws.client(ws.token("rest_api", profile_id=ws.profile([])["id"])["token"])
    r = c.get("/schema")
    assert r.status_code == 200 and r.json()["agents"] == [] and web["token"] not in r.text


def test_schema_needs_a_token(ws):
    r = ws.client(None).get("/schema")
    assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED"
    r = ws.client(ws.token("user_mcp")["token"]).get("/schema")
    assert r.status_code == 403 and r.json()["code"] == "WRONG_PROTOCOL"
