"""Monthly quotas and plan ceilings at their boundaries, auto-recharge, durability across
processes and the calendar-month rollover."""

from __future__ import annotations

import pytest

from api.services import limits
from api.state import AppState
from service.config import Settings
from storage.access import Principal, TokenType
from storage.db import Database
from storage.errors import PlanLimit
from storage.plans import GB
from tests.limits.conftest import counter, next_month, rest_client, seed_counter, this_month, wait_for

FORMULA_TABLE = [{"name": "A", "type": "number"}, {"name": "B", "type": "formula", "formula": "{A} + 1"}]


def test_the_monthly_api_request_quota_refuses_the_request_after_the_last(make_workspace, db):
    ws = make_workspace(plan="free")
    seed_counter(db, ws.id, "api_requests", 9_998)
    assert ws.api.get("/tables").status_code == 200  # 9,999th
    assert ws.api.get("/tables").status_code == 200  # 10,000th
    r = ws.api.get("/tables")
    assert r.status_code == 402
    assert r.json()["code"] == "PLAN_LIMIT_API_REQUESTS" and r.json()["upgrade"] is True
    assert r.headers["X-RateLimit-Limit"] == "60"
    assert ws.api.post("/sql", json={"query": "SELECT * FROM x"}).json()["code"] == "PLAN_LIMIT_API_REQUESTS"
    # refused requests are not counted; the counter reaches the database within a second or so
    assert wait_for(lambda: counter(db, ws.id, "api_requests") == 10_000)


@pytest.mark.parametrize(("plan", "auto_recharge", "continues"), [
    ("pro", True, True),
    ("pro", False, False),
    ("starter", True, False),  # below Pro, auto-recharge does not apply
])
def test_auto_recharge_pays_the_excess_in_ai_credits_on_pro_and_above(make_workspace, admin, db, plan,
                                                                    auto_recharge, continues):
    ws = make_workspace(plan=plan)
    limit = {"pro": 1_000_000, "starter": 100_000}[plan]
    seed_counter(db, ws.id, "api_requests", limit - 1)
    assert admin.patch(f"/workspaces/{ws.id}", json={"auto_recharge": auto_recharge}).status_code == 200
    assert ws.api.get("/tables").status_code == 200  # the last one within the quota
    statuses = [ws.api.get("/tables").status_code for _ in range(3)]
    if not continues:
        assert statuses == [402, 402, 402]
        return
    assert statuses == [200, 200, 200]
    usage = admin.get(f"/workspaces/{ws.id}/usage").json()
    assert usage["quotas"]["ai_credits_excess"]["used"] == 3
    assert usage["quotas"]["api_requests"] == {"used": limit + 3, "limit": limit}


def test_automation_runs_count_one_per_record_and_stop_at_the_quota(make_workspace, db):
    ws = make_workspace(plan="free")  # 1,000 automation runs a month
    seed_counter(db, ws.id, "automation_runs", 997)
    t = ws.create_table("Calc", FORMULA_TABLE)
    url = f"/tables/{t['id']}/records"
    r = ws.api.post(url, json={"fields": {"A": 1}})
    assert r.status_code == 201 and r.json()["pipeline"]["status"] == "ok"  # run 998
    r = ws.api.post(f"{url}?run_pipeline=false", json={"fields": {"A": 1}})
    assert r.status_code == 201 and "pipeline" not in r.json()  # no run, not counted
    r = ws.api.post(f"{url}/batch", json={"rows": [{"A": 2}, {"A": 3}, {"A": 4}]})
    out = r.json()
    assert r.status_code == 200 and out["pipeline"]["code"] == "PLAN_LIMIT_AUTOMATION_RUNS"  # 3 would be 1,001
    assert [x["record"]["fields"]["B"] for x in out["results"]] == [None, None, None]
    r = ws.api.post(f"{url}/batch", json={"rows": [{"A": 2}, {"A": 3}]})
    assert [x["record"]["fields"]["B"] for x in r.json()["results"]] == [3, 4]  # runs 999 and 1,000
    r = ws.api.post(url, json={"fields": {"A": 5}})
    assert r.status_code == 201  # the record is written; its pipeline is refused
    assert r.json()["pipeline"]["code"] == "PLAN_LIMIT_AUTOMATION_RUNS" and r.json()["pipeline"]["upgrade"] is True
    assert r.json()["fields"]["B"] is None
    assert wait_for(lambda: counter(db, ws.id, "automation_runs") == 1_000)


def test_the_tables_ceiling_refuses_the_table_after_the_last(make_workspace):
    ws = make_workspace(plan="free")  # 10 tables
    made = [ws.create_table(f"T{i}") for i in range(10)]
    r = ws.api.post("/tables", json={"name": "T10", "columns": []})
    assert r.status_code == 402
    assert r.json()["code"] == "PLAN_LIMIT_TABLES" and r.json()["upgrade"] is True
    assert ws.api.delete(f"/tables/{made[0]['id']}").status_code == 200
    assert ws.api.post("/tables", json={"name": "T10", "columns": []}).status_code == 201


def _principal(ws_id: int, plan: str) -> Principal:
    return Principal(token_id=0, workspace_id=ws_id, type=TokenType.VIBE_MCP, profile_id=None, plan=plan,
                     read_only=False, expires_at=None)


async def test_builds_ai_credits_and_storage_at_their_boundaries(make_workspace, admin, db, services):
    free, pro = make_workspace(plan="free"), make_workspace(plan="pro")
    admin.patch(f"/workspaces/{pro.id}", json={"auto_recharge": True})
    bucket = db.execute("INSERT INTO wds.buckets (workspace_id, name) VALUES (%s, 'b') RETURNING id",
                        (free.id,)).fetchone()[0]
    db.execute("INSERT INTO wds.objects (workspace_id, bucket_id, path, size) VALUES (%s, %s, 'big', %s)",
               (free.id, bucket, GB - 10))
    state = AppState(settings=Settings(database_url=services.pg.dsn), db=Database(services.pg.dsn))
    await state.db.open()
    try:
        p, pp = _principal(free.id, "free"), _principal(pro.id, "pro")
        for _ in range(10):  # free: 10 builds a month
            assert await limits.charge_builds(state, p) == 0
        with pytest.raises(PlanLimit) as err:
            await limits.charge_builds(state, p)
        assert err.value.code == "PLAN_LIMIT_BUILDS" and err.value.extra["upgrade"] is True
        # AI credits: free has 1,000; a check counts nothing, a charge does
        await limits.check_ai_credits(state, p, 1_000)
        assert await limits.charge_ai_credits(state, p, 999) == 0
        await limits.check_ai_credits(state, p, 1)
        with pytest.raises(PlanLimit) as err:
            await limits.check_ai_credits(state, p, 2)
        assert err.value.code == "PLAN_LIMIT_AI_CREDITS"
        assert await limits.charge_ai_credits(state, p, 1) == 0
        with pytest.raises(PlanLimit):
            await limits.charge_ai_credits(state, p, 1)
        # storage: 1 GB on free, measured from the stored objects
        await limits.check_storage_quota(state, p, 10)
        with pytest.raises(PlanLimit) as err:
            await limits.check_storage_quota(state, p, 11)
        assert err.value.code == "PLAN_LIMIT_STORAGE"
        # pro with auto-recharge: past its 1,000 builds the excess is recorded, not refused
        seed_counter(db, pro.id, "builds", 1_000)
        assert await limits.charge_builds(state, pp, 2) == 2
        await limits.flush(state)
        assert counter(db, free.id, "builds") == 10 and counter(db, free.id, "ai_credits") == 1_000
        assert counter(db, pro.id, "builds") == 1_002 and counter(db, pro.id, "ai_credits_excess") == 2
    finally:
        await limits.stop(state)
        await state.db.close()


def test_counters_survive_a_restart_and_reset_with_the_calendar_month(make_workspace, db, extra_api):
    ws = make_workspace(plan="free")
    seed_counter(db, ws.id, "api_requests", 9_999)
    assert ws.api.get("/tables").status_code == 200
    assert ws.api.get("/tables").status_code == 402
    assert wait_for(lambda: counter(db, ws.id, "api_requests") == 10_000)
    # a process started afterwards (a restart) reads the totals from PostgreSQL
    later = extra_api()
    with rest_client(later.base_url, ws.builder_token) as c:
        assert c.get("/tables").json()["code"] == "PLAN_LIMIT_API_REQUESTS"
    # a process whose clock reads next month starts from zero
    month, first_day = next_month()
    assert month != this_month()
    after = extra_api(WDS_CLOCK_OVERRIDE=first_day)
    with rest_client(after.base_url, ws.builder_token) as c:
        assert c.get("/tables").status_code == 200
        usage = c.get("/usage").json()
    assert usage["month"] == month and usage["quotas"]["api_requests"]["used"] == 2
    assert counter(db, ws.id, "api_requests", month) == 2
    assert counter(db, ws.id, "api_requests") == 10_000
