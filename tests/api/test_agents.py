"""AI agents and their channels: listing with web tokens, builder-only management."""

from __future__ import annotations

import pytest

AGENT_KEYS = {"id", "name", "instructions", "model", "table_ids", "channels", "created_at", "updated_at"}


def make_agent(ws, **body):
    r = ws.api.post("/agents", json={"name": "Helper", **body})
    assert r.status_code == 201, r.text
    return r.json()


def test_create_agent_returns_it(ws):
    t = ws.create_table("Tasks", [{"name": "Title", "type": "text"}])
    a = make_agent(ws, instructions="Answer briefly.", model="gpt-4o-mini", table_ids=[t["id"], t["id"]])
    assert set(a) == AGENT_KEYS
    assert a["name"] == "Helper" and a["instructions"] == "Answer briefly." and a["model"] == "gpt-4o-mini"
    assert a["table_ids"] == [t["id"]] and a["channels"] == []
    assert ws.api.get(f"/agents/{a['id']}").json() == a


def test_agent_defaults(ws):
    a = make_agent(ws)
    assert a["instructions"] == "" and a["model"] is None and a["table_ids"] == []


def test_list_agents_with_channels_and_web_tokens(ws):
    a = make_agent(ws, name="Support")
    b = make_agent(ws, name="Sales")
    web = ws.api.post(f"/agents/{a['id']}/channels", json={"type": "web"})
    assert web.status_code == 201, web.text
    web = web.json()
    assert set(web) == {"id", "type", "token", "enabled"}
    assert web["type"] == "web" and web["token"].startswith("wds_chan_") and web["enabled"] is True
    tg = ws.api.post(f"/agents/{a['id']}/channels", json={"type": "telegram"}).json()
    assert tg["token"].startswith("wds_chan_") and tg["token"] != web["token"]
    r = ws.api.get("/agents")
    assert r.status_code == 200
    listed = {x["name"]: x for x in r.json()}
    assert list(listed) == ["Support", "Sales"]
    assert listed["Sales"]["channels"] == [] and listed["Sales"]["id"] == b["id"]
    # web tokens are public by design; a messaging channel's token is shown at creation only
    assert listed["Support"]["channels"] == [
        {"id": web["id"], "type": "web", "token": web["token"], "enabled": True},
        {"id": tg["id"], "type": "telegram", "token": None, "enabled": True},
    ]


def test_any_rest_token_lists_agents(ws):
    make_agent(ws, name="Public")
    reader = ws.client(ws.token("rest_api", profile_id=ws.profile([])["id"])["token"])
    r = reader.get("/agents")
    assert r.status_code == 200 and [x["name"] for x in r.json()] == ["Public"]


def test_agents_are_per_workspace(ws, make_workspace):
    a = make_agent(ws)
    other = make_workspace()
    assert other.api.get("/agents").json() == []
    for r in (
        other.api.get(f"/agents/{a['id']}"),
        other.api.patch(f"/agents/{a['id']}", json={"name": "Mine"}),
        other.api.delete(f"/agents/{a['id']}"),
        other.api.post(f"/agents/{a['id']}/channels", json={"type": "web"}),
    ):
        assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"
    other_table = other.create_table("Theirs")
    r = ws.api.post("/agents", json={"name": "X", "table_ids": [other_table["id"]]})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"


@pytest.mark.parametrize("body", [
    {},
    {"name": ""},
    {"name": "   "},
    {"name": "x" * 256},
    {"name": "A", "table_ids": [999999999]},
    {"name": "A", "table_ids": "1"},
    {"name": "A", "model": ""},
    {"name": "A", "instructions": 5},
    {"name": "A", "tools": []},
])
def test_bad_agent_is_refused(ws, body):
    r = ws.api.post("/agents", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "VALIDATION_ERROR"
    assert ws.api.get("/agents").json() == []


def test_patch_agent_changes_only_sent_fields(ws):
    t1 = ws.create_table("One")
    t2 = ws.create_table("Two")
    a = make_agent(ws, instructions="Be kind.", model="m1", table_ids=[t1["id"]])
    r = ws.api.patch(f"/agents/{a['id']}", json={"table_ids": [t2["id"], t1["id"]], "model": None})
    assert r.status_code == 200, r.text
    p = r.json()
    assert p["table_ids"] == [t2["id"], t1["id"]] and p["model"] is None
    assert p["name"] == "Helper" and p["instructions"] == "Be kind."
    r = ws.api.patch(f"/agents/{a['id']}", json={"name": ""})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"
    r = ws.api.patch(f"/agents/{a['id']}", json={"table_ids": [123456789]})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"


def test_deleted_tables_drop_out_of_table_ids(ws):
    t1 = ws.create_table("Kept")
    t2 = ws.create_table("Dropped")
    a = make_agent(ws, table_ids=[t1["id"], t2["id"]])
    assert ws.api.delete(f"/tables/{t2['id']}").status_code == 200
    assert ws.api.get(f"/agents/{a['id']}").json()["table_ids"] == [t1["id"]]


def test_delete_agent_removes_its_channels(ws):
    a = make_agent(ws)
    ws.api.post(f"/agents/{a['id']}/channels", json={"type": "web"})
    r = ws.api.delete(f"/agents/{a['id']}")
    assert r.status_code == 200 and r.json() == {"id": a["id"], "deleted": True}
    assert ws.api.get(f"/agents/{a['id']}").status_code == 404
    assert ws.api.get("/agents").json() == []


@pytest.mark.parametrize("kind", ["web", "telegram", "slack", "whatsapp"])
def test_every_channel_type_can_be_created(ws, kind):
    a = make_agent(ws)
    r = ws.api.post(f"/agents/{a['id']}/channels", json={"type": kind})
    assert r.status_code == 201 and r.json()["type"] == kind and r.json()["token"].startswith("wds_chan_")


@pytest.mark.parametrize("body", [{"type": "email"}, {}, {"type": "web", "extra": 1}])
def test_bad_channel_is_refused(ws, body):
    a = make_agent(ws)
    r = ws.api.post(f"/agents/{a['id']}/channels", json=body)
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"
    assert ws.api.get(f"/agents/{a['id']}").json()["channels"] == []


def test_delete_channel(ws):
    a = make_agent(ws)
    c = ws.api.post(f"/agents/{a['id']}/channels", json={"type": "web"}).json()
    r = ws.api.delete(f"/agents/{a['id']}/channels/{c['id']}")
    assert r.status_code == 200 and r.json() == {"id": c["id"], "deleted": True}
    assert ws.api.get(f"/agents/{a['id']}").json()["channels"] == []
    assert ws.api.delete(f"/agents/{a['id']}/channels/{c['id']}").status_code == 404


def test_only_the_builder_token_manages_agents(ws):
    t = ws.create_table("Tasks")
    a = make_agent(ws)
    full = ws.client(ws.token("rest_api", profile_id=ws.profile(
        [{"table_id": t["id"], "read": True, "create": True, "update": True, "delete": True}])["id"])["token"])
    for r in (
        full.post("/agents", json={"name": "Mine"}),
        full.patch(f"/agents/{a['id']}", json={"name": "Mine"}),
        full.delete(f"/agents/{a['id']}"),
        full.post(f"/agents/{a['id']}/channels", json={"type": "web"}),
    ):
        assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN"
    assert ws.api.get(f"/agents/{a['id']}").json() == a


def test_unknown_agent_is_404(ws):
    for path in ("/agents/999999999", "/agents/abc"):
        r = ws.api.get(path)
        assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"
    assert ws.api.patch("/agents/999999999", json={"name": "x"}).status_code == 404
