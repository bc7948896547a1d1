"""The special-fields catalogue endpoints and action columns running its requests."""

from __future__ import annotations

import secrets

import httpx
import pytest

from activities import catalogue
from tests.outside.conftest import add_credential


def test_groups_list_every_integration(ws):
    r = ws.api.get("/special-fields/groups")
    assert r.status_code == 200
    groups = {g["id"]: g for g in r.json()}
    assert {"webhook", "slack", "openai", "jsonplaceholder", "email"} <= set(groups)
    assert all(g["request_count"] >= 1 and g["name"] and g["description"] for g in groups.values())


def test_requests_declare_their_params_and_credential(ws):
    r = ws.api.get("/special-fields/groups/email/requests")
    assert r.status_code == 200
    resend = next(x for x in r.json() if x["id"] == "resend_send")
    assert resend["method"] == "POST"
    assert resend["credential"]["types"] == ["bearer"] and resend["credential"]["required"] is True
    params = {p["name"]: p for p in resend["params"]}
    assert params["to"]["required"] is True and params["to"]["type"] == "string"
    assert ws.api.get("/special-fields/groups/nope/requests").json()["code"] == "NOT_FOUND"


def test_the_catalogue_needs_a_token(base_url):
    r = httpx.get(f"{base_url}/functions/v1/rest-api/special-fields/groups")
    assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED"


def test_every_catalogue_entry_is_valid_and_listed_for_mcp():
    flat = catalogue.integrations()
    assert len(flat) == sum(g["request_count"] for g in catalogue.list_groups())
    assert all({"group_id", "request_id", "params", "credential"} <= set(x) for x in flat)


def test_an_action_runs_a_catalogue_request_through_the_proxy(ws, echo):
    tag = secrets.token_hex(4)
    t = ws.create_table("A", [
        {"name": "Name", "type": "text"}, {"name": "Score", "type": "number"},
        {"name": "Hook", "type": "action", "config": {
            "group_id": "webhook", "request_id": "post_json",
            "params": {"url": echo.url + "/echo?tag=" + tag,
                       "payload": '{"name": {{ Name | tojson }}, "score": {{ Score }}}'}}},
    ])
    rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": "Ann", "Score": 3}}).json()
    assert rec["pipeline"]["status"] == "ok", rec["pipeline"]
    got = [c for c in echo.calls_to("/echo") if c.query.get("tag") == tag]
    assert len(got) == 1 and got[0].method == "POST"
    import json
    assert json.loads(got[0].body) == {"name": "Ann", "score": 3}
    assert got[0].headers["Idempotency-Key"].startswith("wds-")
    assert rec["fields"]["Hook"]["method"] == "POST"


def test_an_action_injects_the_credential_the_request_needs(ws, chat):
    secret = "sk-" + secrets.token_hex(12)
    add_credential(ws, "openai", "bearer", secret)
    t = ws.create_table("A", [
        {"name": "Q", "type": "text"},
        {"name": "Answer", "type": "action", "config": {
            "group_id": "openai", "request_id": "chat_completion", "credential": "openai",
            "params": {"prompt": "say {{ Q }}", "base_url": chat.url + "/v1", "model": "m-1"}}},
    ])
    rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Q": "hi"}}).json()
    assert rec["fields"]["Answer"]["choices"][0]["message"]["content"] == "echo: say hi", rec
    assert chat.calls[-1].headers["Authorization"] == f"Bearer {secret}"


@pytest.mark.parametrize("config", [
    {"group_id": "nope", "request_id": "x"},
    {"group_id": "webhook", "request_id": "nope"},
    {"group_id": "webhook", "request_id": "post_json", "params": {"url": "http://x"}},
    {"group_id": "webhook", "request_id": "post_json", "params": {"url": "http://x", "payload": "{}", "zz": 1}},
    {"group_id": "email", "request_id": "resend_send", "params": {"from": "a", "to": "b", "subject": "c"}},
    {"group_id": "webhook", "request_id": "get", "params": {"url": "{{ broken"}},
])
def test_bad_action_configs_are_refused_at_column_creation(ws, config):
    t = ws.create_table("A", [{"name": "Name", "type": "text"}])
    r = ws.api.post(f"/tables/{t['id']}/columns", json={"name": "Act", "type": "action", "config": config})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", r.text


def test_an_action_with_a_credential_of_the_wrong_kind_fails_the_step(ws, echo):
    add_credential(ws, "pm", "query", "abcd", header_name="k")
    t = ws.create_table("A", [{"name": "Name", "type": "text"}, {"name": "Mail", "type": "action", "config": {
        "group_id": "email", "request_id": "postmark_send", "credential": "pm",
        "params": {"from": "a@x", "to": "b@x", "subject": "{{ Name }}", "base_url": echo.url}}}])
    rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": "n"}}).json()
    assert "needs a header credential" in rec["pipeline"]["errors"]["Mail"]
