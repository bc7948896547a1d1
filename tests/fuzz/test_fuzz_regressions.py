"""Requests the OpenAPI fuzzer once answered with a 500, pinned as plain cases."""

from __future__ import annotations

import httpx
import pytest


@pytest.mark.parametrize("path", [
    "/agents/¹", "/agents/٣", "/tables/1/records/¹", "/tables/1/views/²",
])
def test_unicode_digit_ids_are_not_found_not_a_crash(ws, path):
    r = ws.api.get(path)
    assert r.status_code in (400, 404) and r.json()["code"] in ("NOT_FOUND", "VALIDATION_ERROR")


def test_unicode_digit_bucket_refs_are_not_found(ws):
    r = httpx.get(f"{ws.base_url}/storage/v1/bucket/¹", headers={"Authorization": f"Bearer {ws.builder_token}"})
    assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"


def test_explicit_nulls_in_a_workspace_patch_change_nothing(ws, admin):
    before = admin.get(f"/workspaces/{ws.id}").json()
    r = admin.patch(f"/workspaces/{ws.id}", json={"name": None, "plan": None, "read_only": None,
                                                  "auto_recharge": None, "relay_profile_id": None})
    assert r.status_code == 200, r.text
    after = r.json()
    assert {k: after[k] for k in ("name", "plan", "read_only")} == {k: before[k] for k in ("name", "plan", "read_only")}


def test_nul_characters_are_a_client_error(ws):
    t = ws.create_table("Nul", [{"name": "A", "type": "text"}])
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": "a\x00b"}})
    assert r.status_code == 400 and r.json()["code"] in ("INVALID_VALUE", "VALIDATION_ERROR")
    r = ws.api.post(f"/tables/{t['id']}/schedules", json={"name": "s", "cron": "\x00* * * * *"})
    assert r.status_code == 400, r.text
    s = ws.api.post(f"/tables/{t['id']}/schedules", json={"name": "s", "interval_seconds": 3600, "paused": True})
    assert s.status_code == 201, s.text
    r = ws.api.patch(f"/tables/{t['id']}/schedules/{s.json()['id']}", json={"cron": "\x00 bad", "filters": []})
    assert r.status_code == 400, r.text
    r = ws.api.post("/tables", json={"name": "bad\x00name"})
    assert r.status_code == 400, r.text
