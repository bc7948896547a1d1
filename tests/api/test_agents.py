"""AI agents and their channels: listing with web tokens, builder-only management."""

from __future__ import annotations

import pytest

AGENT_KEYS = {"id", "name", "instructions", "model", "table_ids", "config", "channels", "created_at", "updated_at"}
CHANNEL_KEYS = {"id", "type", "token", "enabled", "config"}
NO_CREDENTIAL = {"credential": None}


def make_agent(ws, **body):
    r = ws.api.post("/agents", json={"name": "Helper", **body})
    assert r.status_code == 201, r.text
    return r.json()


def make_channel(ws, agent, **body):
    r = ws.api.post(f"/agents/{agent['id']}/channels", json={"type": "web", **body})
    assert r.status_code == 201, r.text
    return r.json()


def make_credential(ws, name="bot-token"):
    r = ws.admin.post(f"/workspaces/{ws.id}/credentials", json={"name": name, "type": "bearer", "secret": "123:abc",
                                                                      "hosts": ["api.telegram.org"]})
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
    assert a["config"] == {"write": False, "delete": False}


def test_list_agents_with_channels_and_web_tokens(ws):
    a = make_agent(ws, name="Support")
    b = make_agent(ws, name="Sales")
    web = ws.api.post(f"/agents/{a['id']}/channels", json={"type": "web"})
    assert web.status_code == 201, web.text
    web = web.json()
    assert set(web) == CHANNEL_KEYS
    assert web["type"] == "web" and web["token"].startswith("wds_chan_") and web["enabled"] is True
    assert web["config"] == NO_CREDENTIAL
    tg = ws.api.post(f"/agents/{a['id']}/channels", json={"type": "telegram"}).json()
    assert tg["token"].startswith("wds_chan_") and tg["token"] != web["token"]
    r = ws.api.get("/agents")
    assert r.status_code == 200
    listed = {x["name"]: x for x in r.json()}
    assert list(listed) == ["Support", "Sales"]
    assert listed["Sales"]["channels"] == [] and listed["Sales"]["id"] == b["id"]
    # web tokens are public by design; a messaging channel's token is shown at creation only
    assert listed["Support"]["channels"] == [
        {"id": web["id"], "type": "web", "token": web["token"], "enabled": True, "config": NO_CREDENTIAL},
        {"id": tg["id"], "type": "telegram", "token": None, "enabled": True, "config": NO_CREDENTIAL},
    ]


def test_a_restricted_token_cannot_read_agents(ws):
    """Reading agents follows the rule of managing them: builder only. A rest_api token
    granted some tables sees no agent's instructions, tables or channel tokens."""
    granted = ws.create_table("Granted", [{"name": "Title", "type": "text"}])
    secret = ws.create_table("Secret", [{"name": "Title", "type": "text"}])
    a = make_agent(ws, name="Private", instructions="internal only", table_ids=[granted["id"], secret["id"]])
    c = make_channel(ws, a)
    profile = ws.profile([{"table_id": granted["id"], "read": True, "create": True, "update": True, "delete": True}])
    reader = ws.client(ws.token("rest_api", profile_id=profile["id"])["token"])
    assert reader.get(f"/tables/{granted['id']}/records").status_code == 200
    for r in (reader.get("/agents"), reader.get(f"/agents/{a['id']}"), reader.get("/agents/not-an-id"),
              reader.patch(f"/agents/{a['id']}", json={"name": "Mine"}),
              reader.post(f"/agents/{a['id']}/channels/{c['id']}/rotate")):
        assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN", r.text
        assert c["token"] not in r.text and "internal only" not in r.text
    schema = reader.get("/schema")
    assert schema.status_code == 200 and schema.json()["agents"] == []
    assert c["token"] not in schema.text and "internal only" not in schema.text
    # the builder still reads them all, also in a read-only workspace
    assert ws.admin.patch(f"/workspaces/{ws.id}", json={"read_only": True}).status_code == 200
    try:
        assert ws.api.get(f"/agents/{a['id']}").json()["channels"] == [c]
        assert [x["name"] for x in ws.api.get("/agents").json()] == ["Private"]
        assert [x["name"] for x in ws.api.get("/schema").json()["agents"]] == ["Private"]
    finally:
        assert ws.admin.patch(f"/workspaces/{ws.id}", json={"read_only": False}).status_code == 200


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
    c = make_channel(ws, a)
    for r in (
        other.api.patch(f"/agents/{a['id']}/channels/{c['id']}", json={"enabled": False}),
        other.api.post(f"/agents/{a['id']}/channels/{c['id']}/rotate"),
        other.api.delete(f"/agents/{a['id']}/channels/{c['id']}"),
    ):
        assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"
    assert ws.api.get(f"/agents/{a['id']}").json()["channels"] == [c]
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
    {"name": "A", "config": {"read": True}},
    {"name": "A", "config": {"write": "yes"}},
    {"name": "A", "config": {"write": 1}},
    {"name": "A", "config": {"delete": "true"}},
    {"name": "A", "config": ["write"]},
    {"name": "A", "config": "write"},
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
    c = make_channel(ws, a)
    for r in (
        full.patch(f"/agents/{a['id']}/channels/{c['id']}", json={"enabled": False}),
        full.post(f"/agents/{a['id']}/channels/{c['id']}/rotate"),
        full.delete(f"/agents/{a['id']}/channels/{c['id']}"),
    ):
        assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN"
    assert ws.api.get(f"/agents/{a['id']}").json()["channels"] == [c]


def test_unknown_agent_is_404(ws):
    for path in ("/agents/999999999", "/agents/abc"):
        r = ws.api.get(path)
        assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"
    assert ws.api.patch("/agents/999999999", json={"name": "x"}).status_code == 404


# --------------------------------------------------------------------------- settings the chat reads


def test_agent_config_round_trips(ws):
    a = make_agent(ws, config={"write": True})
    assert a["config"] == {"write": True, "delete": False}
    assert ws.api.get(f"/agents/{a['id']}").json()["config"] == {"write": True, "delete": False}
    assert make_agent(ws, name="Both", config={"write": True, "delete": True})["config"] == {"write": True, "delete": True}
    # a null on creation is just the default
    assert make_agent(ws, name="Nulls", config={"write": None})["config"] == {"write": False, "delete": False}


@pytest.mark.parametrize("patch,expected", [
    ({"config": {"delete": True}}, {"write": True, "delete": True}),    # only the sent key changes
    ({"config": {"write": False}}, {"write": False, "delete": False}),
    ({"config": {"write": None}}, {"write": False, "delete": False}),   # null clears (back to false)
    ({"config": {}}, {"write": True, "delete": False}),                 # nothing sent, nothing changes
    ({"config": None}, {"write": True, "delete": False}),
    ({"name": "Renamed"}, {"write": True, "delete": False}),            # other fields leave config alone
])
def test_patch_agent_merges_config(ws, patch, expected):
    a = make_agent(ws, config={"write": True})
    r = ws.api.patch(f"/agents/{a['id']}", json=patch)
    assert r.status_code == 200, r.text
    assert r.json()["config"] == expected
    assert ws.api.get(f"/agents/{a['id']}").json()["config"] == expected


@pytest.mark.parametrize("config", [{"write": "true"}, {"owner": True}, [], 5])
def test_patch_agent_refuses_bad_config(ws, config):
    a = make_agent(ws, config={"write": True})
    r = ws.api.patch(f"/agents/{a['id']}", json={"config": config})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"
    assert ws.api.get(f"/agents/{a['id']}").json()["config"] == {"write": True, "delete": False}


def test_channel_can_be_created_disabled_with_a_credential(ws):
    a = make_agent(ws)
    make_credential(ws, "tg-bot")
    c = make_channel(ws, a, type="telegram", enabled=False, config={"credential": "tg-bot"})
    assert set(c) == CHANNEL_KEYS
    assert c["enabled"] is False and c["config"] == {"credential": "tg-bot"} and c["token"].startswith("wds_chan_")
    listed = ws.api.get(f"/agents/{a['id']}").json()["channels"]
    assert listed == [{**c, "token": None}]


def test_patch_channel_enables_and_disables(ws):
    a = make_agent(ws)
    c = make_channel(ws, a)
    path = f"/agents/{a['id']}/channels/{c['id']}"
    r = ws.api.patch(path, json={"enabled": False})
    assert r.status_code == 200, r.text
    assert r.json() == {**c, "enabled": False}
    assert ws.api.get(f"/agents/{a['id']}").json()["channels"][0]["enabled"] is False
    # absent or null leaves it as is
    assert ws.api.patch(path, json={}).json()["enabled"] is False
    assert ws.api.patch(path, json={"enabled": None}).json()["enabled"] is False
    assert ws.api.patch(path, json={"enabled": True}).json() == c


def test_patch_channel_sets_and_clears_the_credential(ws):
    a = make_agent(ws)
    make_credential(ws, "bot-1")
    make_credential(ws, "bot-2")
    # disabled: an enabled telegram channel with a credential registers its webhook with
    # Telegram (tests/chat/test_telegram.py), which this API process has no stand-in for
    c = make_channel(ws, a, type="telegram", enabled=False)
    path = f"/agents/{a['id']}/channels/{c['id']}"
    r = ws.api.patch(path, json={"config": {"credential": "bot-1"}})
    assert r.status_code == 200, r.text
    assert r.json()["config"] == {"credential": "bot-1"} and r.json()["token"] is None
    # enabling alone keeps the credential; a new name replaces it; null clears it
    assert ws.api.patch(path, json={"enabled": False}).json()["config"] == {"credential": "bot-1"}
    assert ws.api.patch(path, json={"config": {"credential": "bot-2"}}).json()["config"] == {"credential": "bot-2"}
    assert ws.api.patch(path, json={"config": {}}).json()["config"] == {"credential": "bot-2"}
    r = ws.api.patch(path, json={"config": {"credential": None}})
    assert r.json()["config"] == NO_CREDENTIAL and r.json()["enabled"] is False


def test_the_credential_must_exist_in_the_workspace(ws, make_workspace):
    a = make_agent(ws)
    other = make_workspace()
    make_credential(other, "theirs")
    r = ws.api.post(f"/agents/{a['id']}/channels", json={"type": "telegram", "config": {"credential": "theirs"}})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"
    assert ws.api.get(f"/agents/{a['id']}").json()["channels"] == []
    c = make_channel(ws, a, type="telegram")
    r = ws.api.patch(f"/agents/{a['id']}/channels/{c['id']}", json={"config": {"credential": "nope"}, "enabled": False})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"
    # nothing of a refused patch is applied
    assert ws.api.get(f"/agents/{a['id']}").json()["channels"][0] == {**c, "token": None}


@pytest.mark.parametrize("body", [
    {"enabled": "no"},
    {"enabled": 0},
    {"config": {"credential": 5}},
    {"config": {"credential": ""}},
    {"config": {"credential": "x" * 256}},
    {"config": {"token": "abc"}},
    {"config": "bot"},
    {"type": "web"},
])
def test_bad_channel_patch_is_refused(ws, body):
    a = make_agent(ws)
    c = make_channel(ws, a, type="telegram")
    r = ws.api.patch(f"/agents/{a['id']}/channels/{c['id']}", json=body)
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"


def test_web_channels_take_no_credential(ws):
    a = make_agent(ws)
    make_credential(ws, "bot")
    r = ws.api.post(f"/agents/{a['id']}/channels", json={"type": "web", "config": {"credential": "bot"}})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"
    c = make_channel(ws, a)
    r = ws.api.patch(f"/agents/{a['id']}/channels/{c['id']}", json={"config": {"credential": "bot"}})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"


@pytest.mark.parametrize("kind", ["web", "telegram"])
def test_rotate_gives_a_new_token_once(ws, kind):
    a = make_agent(ws)
    c = make_channel(ws, a, type=kind)
    r = ws.api.post(f"/agents/{a['id']}/channels/{c['id']}/rotate")
    assert r.status_code == 200, r.text
    new = r.json()
    assert set(new) == CHANNEL_KEYS and new["id"] == c["id"] and new["type"] == kind
    assert new["token"].startswith("wds_chan_") and new["token"] != c["token"]
    listed = ws.api.get(f"/agents/{a['id']}").json()["channels"][0]
    assert listed["token"] == (new["token"] if kind == "web" else None)


def test_unknown_channel_is_404(ws):
    a = make_agent(ws)
    b = make_agent(ws, name="Other")
    c = make_channel(ws, b)
    for path in (f"/agents/{a['id']}/channels/{c['id']}", f"/agents/{a['id']}/channels/999999999",
                 f"/agents/{a['id']}/channels/abc", f"/agents/999999999/channels/{c['id']}"):
        for r in (ws.api.patch(path, json={"enabled": False}), ws.api.post(f"{path}/rotate")):
            assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND", path
    assert ws.api.get(f"/agents/{b['id']}").json()["channels"] == [c]
