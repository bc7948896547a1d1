"""Idempotency-Key on record writes: replay, conflict, scope per token, batches."""

from __future__ import annotations

import uuid


def test_a_repeated_create_replays_the_first_response_without_writing_again(ws):
    t = ws.create_table("I", [{"name": "Amount", "type": "number"}, {"name": "A", "type": "number"},
                              {"name": "B", "type": "formula", "formula": "{A} * 2"}])
    key = {"Idempotency-Key": str(uuid.uuid4())}
    first = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1}}, headers=key)
    assert first.status_code == 201 and first.headers["Idempotent-Replayed"] == "false"
    again = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1}}, headers=key)
    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
    # the first answer byte for byte: its keys in their order (jsonb storage reordered them:
    # "pipeline" before "created_at", shorter field names first)
    assert again.content == first.content
    assert list(again.json()) == ["id", "fields", "created_at", "updated_at", "pipeline"]
    assert len(ws.api.get(f"/tables/{t['id']}/records").json()["records"]) == 1
    # an edit's replay too, with field names jsonb would sort
    rid = first.json()["id"]
    key = {"Idempotency-Key": str(uuid.uuid4())}
    edit = ws.api.patch(f"/tables/{t['id']}/records/{rid}", json={"fields": {"A": 5}}, headers=key)
    replayed = ws.api.patch(f"/tables/{t['id']}/records/{rid}", json={"fields": {"A": 5}}, headers=key)
    assert edit.status_code == 200 and replayed.headers["Idempotent-Replayed"] == "true"
    assert replayed.content == edit.content and list(replayed.json()["fields"]) == ["Amount", "A", "B"]


def test_same_key_with_a_different_body_is_a_conflict(ws):
    t = ws.create_table("I", [{"name": "A", "type": "number"}])
    key = {"Idempotency-Key": "k-" + uuid.uuid4().hex}
    assert ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1}}, headers=key).status_code == 201
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 2}}, headers=key)
    assert r.status_code == 409 and r.json()["code"] == "CONFLICT"
    assert len(ws.api.get(f"/tables/{t['id']}/records").json()["records"]) == 1


def test_keys_are_scoped_to_the_token(ws):
    t = ws.create_table("I", [{"name": "A", "type": "number"}])
    other = ws.client(ws.token("vibe_mcp")["token"])
    key = {"Idempotency-Key": "shared-" + uuid.uuid4().hex}
    a = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1}}, headers=key)
    b = other.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1}}, headers=key)
    assert a.json()["id"] != b.json()["id"] and b.headers["Idempotent-Replayed"] == "false"


def test_patch_delete_and_batch_are_idempotent(ws):
    t = ws.create_table("I", [{"name": "A", "type": "number"}])
    rid = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1}}).json()["id"]
    k1 = {"Idempotency-Key": uuid.uuid4().hex}
    p1 = ws.api.patch(f"/tables/{t['id']}/records/{rid}", json={"fields": {"A": 5}}, headers=k1)
    ws.api.patch(f"/tables/{t['id']}/records/{rid}", json={"fields": {"A": 9}})
    p2 = ws.api.patch(f"/tables/{t['id']}/records/{rid}", json={"fields": {"A": 5}}, headers=k1)
    assert p2.json() == p1.json() and p2.headers["Idempotent-Replayed"] == "true"
    assert ws.api.get(f"/tables/{t['id']}/records/{rid}").json()["fields"]["A"] == 9  # not written again
    k2 = {"Idempotency-Key": uuid.uuid4().hex}
    assert ws.api.delete(f"/tables/{t['id']}/records/{rid}", headers=k2).status_code == 200
    again = ws.api.delete(f"/tables/{t['id']}/records/{rid}", headers=k2)
    assert again.status_code == 200 and again.json() == {"id": rid, "deleted": True}
    k3 = {"Idempotency-Key": uuid.uuid4().hex}
    rows = {"rows": [{"fields": {"A": i}} for i in range(10)]}
    b1 = ws.api.post(f"/tables/{t['id']}/records/batch", json=rows, headers=k3)
    b2 = ws.api.post(f"/tables/{t['id']}/records/batch", json=rows, headers=k3)
    assert b1.json() == b2.json()
    assert len(ws.api.get(f"/tables/{t['id']}/records").json()["records"]) == 10


def test_validation_errors_are_replayed_too_and_bad_keys_refused(ws):
    t = ws.create_table("I", [{"name": "A", "type": "number"}])
    key = {"Idempotency-Key": uuid.uuid4().hex}
    r1 = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": "x"}}, headers=key)
    r2 = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": "x"}}, headers=key)
    assert r1.status_code == r2.status_code == 400 and r2.json()["code"] == "INVALID_VALUE"
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1}}, headers={"Idempotency-Key": "x" * 300})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"
