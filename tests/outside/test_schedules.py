"""Schedules: Temporal Schedules that run run-actions for a table; each firing is a run."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from tests.outside.conftest import wait_run


def formula_table(ws, rows: int = 5) -> dict:
    t = ws.create_table("S", [{"name": "A", "type": "number"},
                              {"name": "B", "type": "formula", "formula": "{A} * 2"},
                              {"name": "C", "type": "formula", "formula": "{A} + 100"}])
    ws.api.post(f"/tables/{t['id']}/records/batch",
                json={"rows": [{"A": i} for i in range(rows)], "run_pipeline": False})
    return t


def wait_recent_run(ws, table_id: int, sid: int, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = ws.api.get(f"/tables/{table_id}/schedules/{sid}").json()
        if got.get("recent_runs"):
            return got
        time.sleep(0.3)
    raise AssertionError("the schedule did not fire")


def test_an_interval_schedule_fires_and_runs_the_table(ws):
    t = formula_table(ws)
    b = t["columns"][1]["id"]
    r = ws.api.post(f"/tables/{t['id']}/schedules", json={
        "name": "every 2 s", "interval_seconds": 2, "filters": {"A": "gte.3"}, "column_ids": [b]})
    assert r.status_code == 201, r.text
    s = r.json()
    assert s["schedule_id"] == f"schedule/ws{ws.id}/t{t['id']}/{s['id']}" and s["paused"] is False
    got = wait_recent_run(ws, t["id"], s["id"])
    assert got["next_run_at"]
    run = wait_run(ws.api, got["recent_runs"][0]["run_id"])
    assert run["total"] == 2 and run["done"] == 2 and run["failed"] == 0
    rows = ws.api.get(f"/tables/{t['id']}/records?order=A.asc").json()["records"]
    assert [x["fields"]["B"] for x in rows] == [None, None, None, 6, 8]
    assert all(x["fields"]["C"] is None for x in rows)  # only column_ids ran
    assert ws.api.delete(f"/tables/{t['id']}/schedules/{s['id']}").json() == {"id": s["id"], "deleted": True}


def test_trigger_pause_unpause_patch_list_and_delete(ws, services):
    t = formula_table(ws, rows=3)
    base = f"/tables/{t['id']}/schedules"
    s = ws.api.post(base, json={"name": "yearly", "cron": "0 0 1 1 *", "paused": True}).json()
    assert s["paused"] is True and s["cron"] == "0 0 1 1 *" and s["interval_seconds"] is None
    r = ws.api.post(f"{base}/{s['id']}/trigger")
    assert r.status_code == 202 and r.json() == {"id": s["id"], "triggered": True}
    run = wait_run(ws.api, wait_recent_run(ws, t["id"], s["id"])["recent_runs"][0]["run_id"])
    assert run["done"] == 3
    assert [x["fields"]["C"] for x in ws.api.get(f"{base[:-10]}/records?order=A.asc").json()["records"]] == [100, 101, 102]
    assert ws.api.post(f"{base}/{s['id']}/unpause").json()["paused"] is False
    assert ws.api.post(f"{base}/{s['id']}/pause").json()["paused"] is True
    r = ws.api.patch(f"{base}/{s['id']}", json={"name": "hourly", "interval_seconds": 3600})
    assert r.status_code == 200 and r.json()["name"] == "hourly" and r.json()["cron"] is None
    assert [x["id"] for x in ws.api.get(base).json()] == [s["id"]]
    desc = asyncio.run(_describe(services.temporal.address, s["schedule_id"]))
    assert desc.schedule.state.paused and desc.schedule.spec.intervals[0].every.total_seconds() == 3600
    assert ws.api.delete(f"{base}/{s['id']}").status_code == 200
    with pytest.raises(RPCError):
        asyncio.run(_describe(services.temporal.address, s["schedule_id"]))
    assert ws.api.get(f"{base}/{s['id']}").json()["code"] == "NOT_FOUND"


async def _describe(address: str, schedule_id: str):
    client = await Client.connect(address)
    return await client.get_schedule_handle(schedule_id).describe()


@pytest.mark.parametrize(("body", "code"), [
    ({"name": "x"}, "VALIDATION_ERROR"),
    ({"name": "x", "cron": "* * * * *", "interval_seconds": 60}, "VALIDATION_ERROR"),
    ({"name": "x", "interval_seconds": 0}, "VALIDATION_ERROR"),
    ({"name": "x", "cron": "not a cron"}, "VALIDATION_ERROR"),
    ({"name": "x", "cron": "@every 1s"}, "VALIDATION_ERROR"),  # would skip interval_seconds' bounds
    ({"name": "x", "cron": "CRON_TZ=Europe/Paris 0 3 * * *"}, "VALIDATION_ERROR"),  # cron is UTC
    ({"name": "x", "cron": "0 3 * * * *"}, "VALIDATION_ERROR"),
    ({"name": "x", "interval_seconds": 60, "column_ids": [999999]}, "VALIDATION_ERROR"),
    ({"name": "x", "interval_seconds": 60, "filters": {"Nope": "eq.1"}}, "UNKNOWN_COLUMN"),
])
def test_bad_schedules_are_refused(ws, body, code):
    t = formula_table(ws, rows=0)
    r = ws.api.post(f"/tables/{t['id']}/schedules", json=body)
    assert r.status_code == 400 and r.json()["code"] == code, r.text
    assert ws.api.get(f"/tables/{t['id']}/schedules").json() == []


def test_schedules_need_update_rights(ws):
    t = formula_table(ws, rows=0)
    prof = ws.profile([{"table_id": t["id"], "read": True}])
    reader = ws.client(ws.token("rest_api", profile_id=prof["id"])["token"])
    r = reader.post(f"/tables/{t['id']}/schedules", json={"name": "x", "interval_seconds": 60})
    assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN"
    assert reader.get(f"/tables/{t['id']}/schedules").status_code == 200


def test_a_firing_past_the_automation_run_quota_is_skipped(make_workspace, services):
    ws = make_workspace(plan="free")
    t = formula_table(ws, rows=2)
    month = time.strftime("%Y-%m", time.gmtime())
    with psycopg.connect(services.pg.dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO wds.quota_counters (workspace_id, month, kind, used) VALUES (%s, %s,"
                     " 'automation_runs', 1000) ON CONFLICT (workspace_id, month, kind) DO UPDATE SET used = 1000",
                     (ws.id, month))
    s = ws.api.post(f"/tables/{t['id']}/schedules", json={"name": "q", "cron": "0 0 1 1 *"}).json()
    ws.api.post(f"/tables/{t['id']}/schedules/{s['id']}/trigger")
    wid = wait_recent_run(ws, t["id"], s["id"])["recent_runs"][0]["workflow_id"]
    result = asyncio.run(_result(services.temporal.address, wid))
    assert result["skipped"].startswith("PLAN_LIMIT_AUTOMATION_RUNS")
    assert all(x["fields"]["B"] is None for x in ws.api.get(f"/tables/{t['id']}/records").json()["records"])


async def _result(address: str, workflow_id: str) -> dict:
    client = await Client.connect(address)
    return await client.get_workflow_handle(workflow_id).result()


def test_a_renamed_filter_column_carries_into_the_schedule(ws):
    t = formula_table(ws)
    a, b = t["columns"][0]["id"], t["columns"][1]["id"]
    s = ws.api.post(f"/tables/{t['id']}/schedules", json={
        "name": "paused", "cron": "0 0 1 1 *", "paused": True, "filters": {"A": "gte.3"}, "column_ids": [b]}).json()
    r = ws.api.delete(f"/tables/{t['id']}/columns/{a}")
    assert r.status_code == 409 and {"kind": "schedule", "id": s["id"], "name": "paused",
                                     "table_id": t["id"]} in r.json()["dependents"]
    assert ws.api.patch(f"/tables/{t['id']}/columns/{a}", json={"name": "Amount"}).status_code == 200
    got = ws.api.get(f"/tables/{t['id']}/schedules/{s['id']}").json()
    assert got["filters"] == [{"column": "Amount", "op": "gte", "value": "3"}]
    assert ws.api.post(f"/tables/{t['id']}/schedules/{s['id']}/trigger").status_code == 202
    run = wait_run(ws.api, wait_recent_run(ws, t["id"], s["id"])["recent_runs"][0]["run_id"])
    assert run["total"] == 2 and run["done"] == 2, run
    rows = ws.api.get(f"/tables/{t['id']}/records?order=Amount.asc").json()["records"]
    assert [x["fields"]["B"] for x in rows] == [None, None, None, 6, 8]


def wait_firing_status(ws, table_id: int, sid: int, timeout: float = 30) -> dict:
    """The schedule's most recent firing once its run row says how it ended up."""
    deadline = time.monotonic() + timeout
    got: dict = {}
    while time.monotonic() < deadline:
        got = ws.api.get(f"/tables/{table_id}/schedules/{sid}").json()
        if got.get("recent_runs") and got["recent_runs"][-1]["status"] is not None:
            return got["recent_runs"][-1]
        time.sleep(0.3)
    raise AssertionError(f"the schedule's firing has no run: {got}")


def _scheduled_by_editor(ws):
    """A table, a rest_api token whose profile may update it, and a paused schedule it made."""
    t = formula_table(ws, rows=3)
    prof = ws.profile([{"table_id": t["id"], "read": True, "update": True}])
    tok = ws.token("rest_api", profile_id=prof["id"])
    editor = ws.client(tok["token"])
    r = editor.post(f"/tables/{t['id']}/schedules", json={"name": "by editor", "cron": "0 0 1 1 *", "paused": True})
    assert r.status_code == 201, r.text
    return t, prof, tok, r.json()


def _untouched(ws, t) -> bool:
    return all(x["fields"]["B"] is None for x in ws.api.get(f"/tables/{t['id']}/records").json()["records"])


def test_a_firing_after_its_token_is_revoked_is_skipped(ws):
    t, _, tok, s = _scheduled_by_editor(ws)
    assert ws.admin.delete(f"/workspaces/{ws.id}/tokens/{tok['id']}").status_code == 200
    assert ws.api.post(f"/tables/{t['id']}/schedules/{s['id']}/trigger").status_code == 202
    fired = wait_firing_status(ws, t["id"], s["id"])
    assert fired["status"] == "skipped", fired
    assert fired["skipped_reason"] == "the token that made this schedule was revoked or has expired"
    run = ws.api.get(f"/runs/{fired['run_id']}").json()
    assert run["status"] == "skipped" and run["total"] == 0 and run["reason"] == fired["skipped_reason"]
    assert _untouched(ws, t)


def test_a_firing_after_the_token_lost_its_grant_is_skipped(ws):
    t, prof, _, s = _scheduled_by_editor(ws)
    r = ws.admin.put(f"/workspaces/{ws.id}/profiles/{prof['id']}/grants", json=[{"table_id": t["id"], "read": True}])
    assert r.status_code == 200, r.text
    assert ws.api.post(f"/tables/{t['id']}/schedules/{s['id']}/trigger").status_code == 202
    fired = wait_firing_status(ws, t["id"], s["id"])
    assert fired["status"] == "skipped" and "no longer has update permission" in fired["skipped_reason"], fired
    assert _untouched(ws, t)


def test_a_rotated_token_keeps_its_schedules_firing(ws):
    t, _, tok, s = _scheduled_by_editor(ws)
    r = ws.admin.post(f"/workspaces/{ws.id}/tokens/{tok['id']}/rotate")
    assert r.status_code == 200, r.text
    assert ws.api.post(f"/tables/{t['id']}/schedules/{s['id']}/trigger").status_code == 202
    fired = wait_firing_status(ws, t["id"], s["id"])
    assert fired["status"] != "skipped", fired
    run = wait_run(ws.api, fired["run_id"])
    assert run["done"] == 3
    assert [x["fields"]["B"] for x in ws.api.get(f"/tables/{t['id']}/records?order=A.asc").json()["records"]] == [0, 2, 4]


def test_a_renamed_column_carries_into_a_schedules_or_group(ws):
    """A schedule's ``or``/``and`` group names columns by id as a saved view's does: a
    rename carries into it (it was kept by name: the next firing was skipped, "unknown
    column"), and deleting a column the group names is refused with the schedule listed."""
    t = formula_table(ws)
    a, b = t["columns"][0]["id"], t["columns"][1]["id"]
    s = ws.api.post(f"/tables/{t['id']}/schedules", json={
        "name": "grouped", "cron": "0 0 1 1 *", "paused": True,
        "filters": {"or": "(A.eq.0,and(A.gte.3,id.gt.0))"}, "column_ids": [b]}).json()
    assert s["filters"] == [{"or": "(A.eq.0,and(A.gte.3,id.gt.0))"}]
    r = ws.api.delete(f"/tables/{t['id']}/columns/{a}")
    assert r.status_code == 409 and {"kind": "schedule", "id": s["id"], "name": "grouped",
                                     "table_id": t["id"]} in r.json()["dependents"]
    assert ws.api.patch(f"/tables/{t['id']}/columns/{a}", json={"name": "My.Amount"}).status_code == 200
    got = ws.api.get(f"/tables/{t['id']}/schedules/{s['id']}").json()
    assert got["filters"] == [{"or": '("My.Amount".eq.0,and("My.Amount".gte.3,id.gt.0))'}]
    assert ws.api.post(f"/tables/{t['id']}/schedules/{s['id']}/trigger").status_code == 202
    firing = wait_firing_status(ws, t["id"], s["id"])
    assert firing["status"] != "skipped", firing
    run = wait_run(ws.api, firing["run_id"])
    assert run["total"] == 3 and run["done"] == 3, run
    rows = ws.api.get(f"/tables/{t['id']}/records?order=My.Amount.asc").json()["records"]
    assert [x["fields"]["B"] for x in rows] == [0, None, None, 6, 8]
