"""The 43 builder tools (vibe_mcp): tables, columns, views, schedules, agents, channels,
publishing, access, batch records and credentials — happy paths and their errors."""

from __future__ import annotations

import asyncio

import anyio
import httpx
import pytest

from tests.mcp.conftest import data, error_code


async def test_table_and_column_tools(ws, mcp):
    async with mcp(ws.builder_token) as c:
        t = data(await c.call_tool("create_table", {"name": "Crm", "icon": "users", "columns": [
            {"name": "Name", "type": "text", "required": True},
            {"name": "Stage", "type": "single_select", "options": ["lead", {"label": "won", "color": "green"}]}]}))
        assert [col["name"] for col in t["columns"]] == ["Name", "Stage"]
        assert error_code(await c.call_tool("create_table", {"name": "Crm"})) == "CONFLICT"
        assert error_code(await c.call_tool("create_table", {"name": "X", "columns": [{"name": "a", "type": "nope"}]})) \
            in ("VALIDATION_ERROR", "INVALID_VALUE")
        col = data(await c.call_tool("create_column", {"table_id": "Crm", "name": "Value", "type": "number"}))
        assert col["type"] == "number"
        f = data(await c.call_tool("create_column", {"table_id": "Crm", "name": "Twice", "type": "formula",
                                                     "formula": "{Value} * 2"}))
        assert error_code(await c.call_tool("create_column", {"table_id": "Crm", "name": "Bad", "type": "formula",
                                                              "formula": "{Nope} +"})) == "INVALID_FORMULA"
        assert error_code(await c.call_tool("create_column", {"table_id": "Crm", "name": "Bad", "type": "formula",
                                                              "formula": "{Nope} * 2"})) == "UNKNOWN_COLUMN"
        ren = data(await c.call_tool("update_column", {"table_id": "Crm", "column": "Value", "name": "Amount"}))
        assert ren["name"] == "Amount" and ren["id"] == col["id"]
        by_name = {x["name"]: x for x in data(await c.call_tool("get_table", {"table_id": "Crm"}))["columns"]}
        assert by_name["Twice"]["formula"] == "{Amount} * 2"
        assert error_code(await c.call_tool("update_column", {"table_id": "Crm", "column": "Amount",
                                                              "formula": "{Twice}", "type": "formula"})) \
            == "CIRCULAR_REFERENCE"
        assert error_code(await c.call_tool("delete_column", {"table_id": "Crm", "column": "Amount"})) \
            == "COLUMN_IN_USE"
        assert error_code(await c.call_tool("update_column", {"table_id": "Crm", "column": "Nope", "name": "x"})) \
            == "NOT_FOUND"
        order = data(await c.call_tool("reorder_columns", {"table_id": "Crm", "columns": ["Twice", "Amount"]}))
        assert [x["name"] for x in order["columns"]] == ["Twice", "Amount", "Name", "Stage"]
        got = data(await c.call_tool("get_table", {"table_id": t["id"]}))
        assert [x["name"] for x in got["columns"]] == ["Twice", "Amount", "Name", "Stage"]
        assert got["access"] == {"read": True, "create": True, "update": True, "delete": True}
        up = data(await c.call_tool("update_table", {"table_id": "Crm", "name": "Customers", "icon": "star"}))
        assert (up["name"], up["icon"]) == ("Customers", "star")
        assert data(await c.call_tool("delete_column", {"table_id": "Customers", "column": f["id"]}))["deleted"]
        assert data(await c.call_tool("delete_column", {"table_id": "Customers", "column": "Amount"}))["deleted"]
        assert data(await c.call_tool("delete_table", {"table_id": "Customers"})) == {"id": t["id"], "deleted": True}
        assert error_code(await c.call_tool("get_table", {"table_id": t["id"]})) == "NOT_FOUND"


async def test_update_column_converts_and_refuses_a_lossy_change(ws, mcp):
    t = ws.create_table("Conv", [{"name": "Amount", "type": "text"}])
    for v in ("12", "1,234.5", "n/a"):
        ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Amount": v}})
    async with mcp(ws.builder_token) as c:
        args = {"table_id": "Conv", "column": "Amount", "type": "number"}
        assert error_code(await c.call_tool("update_column", args)) == "LOSSY_CHANGE"
        col = data(await c.call_tool("update_column", {**args, "allow_loss": True}))
        assert col["type"] == "number" and col["conversion"] == {"converted": 2, "lost": 1}
    rows = ws.api.get(f"/tables/{t['id']}/records").json()["records"]
    assert sorted((r["fields"]["Amount"] for r in rows), key=lambda v: (v is None, v)) == [12, 1234.5, None]


async def test_view_and_publishing_tools(ws, mcp, base_url):
    ws.create_table("Leads", [{"name": "Name", "type": "text", "required": True}, {"name": "Email", "type": "text"}])
    async with mcp(ws.builder_token) as c:
        v = data(await c.call_tool("create_view", {"table_id": "Leads", "name": "All", "view_type": "grid",
                                                   "config": {"hidden_columns": ["Email"]}}))
        assert error_code(await c.call_tool("create_view", {"table_id": "Leads", "name": "Bad", "view_type": "kanban",
                                                            "config": {}})) == "VALIDATION_ERROR"
        got = data(await c.call_tool("get_view", {"table_id": "Leads", "view_id": v["id"]}))
        assert got["config"] == {"hidden_columns": ["Email"]} and got["published"] is None
        up = data(await c.call_tool("update_view", {"table_id": "Leads", "view_id": v["id"], "name": "Everyone"}))
        assert up["name"] == "Everyone"
        pub = data(await c.call_tool("publish_view", {"table_id": "Leads", "view_id": v["id"]}))
        assert pub["published"] == "view" and pub["url"] == f"{base_url}/p/{pub['share_id']}"
        assert error_code(await c.call_tool("publish_view", {"table_id": "Leads", "view_id": v["id"],
                                                             "mode": "form"})) == "VALIDATION_ERROR"
        again = data(await c.call_tool("publish_view", {"table_id": "Leads", "view_id": v["id"]}))
        assert again["share_id"] == pub["share_id"]  # links stay valid when re-published
        status = data(await c.call_tool("get_publish_status", {"table_id": "Leads", "view_id": v["id"]}))
        assert status == pub
        listed = data(await c.call_tool("list_published", {}))["published"]
        assert [(p["view_id"], p["share_id"]) for p in listed] == [(v["id"], pub["share_id"])]
        async with httpx.AsyncClient() as anon:
            assert (await anon.get(pub["url"])).status_code == 200
        off = data(await c.call_tool("unpublish_view", {"table_id": "Leads", "view_id": v["id"]}))
        assert off["published"] is None and off["url"] is None
        async with httpx.AsyncClient() as anon:
            assert (await anon.get(pub["url"])).status_code == 404
        assert data(await c.call_tool("delete_view", {"table_id": "Leads", "view_id": v["id"]}))["deleted"]
        assert error_code(await c.call_tool("get_view", {"table_id": "Leads", "view_id": v["id"]})) == "NOT_FOUND"


async def test_schedule_tools_drive_a_temporal_schedule(ws, mcp):
    t = ws.create_table("Nums", [{"name": "A", "type": "number"}, {"name": "B", "type": "formula", "formula": "{A}+1"}])
    rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1}}, params={"run_pipeline": "false"}).json()
    assert rec["fields"]["B"] is None
    async with mcp(ws.builder_token) as c:
        assert error_code(await c.call_tool("create_schedule", {"table_id": "Nums", "name": "x"})) == "VALIDATION_ERROR"
        assert error_code(await c.call_tool("create_schedule", {"table_id": "Nums", "name": "x", "cron": "0 * * * *",
                                                                "columns": ["A"]})) == "VALIDATION_ERROR"
        s = data(await c.call_tool("create_schedule", {"table_id": "Nums", "name": "hourly", "cron": "0 * * * *",
                                                       "columns": ["B"], "filters": {"A": "gte.0"}}))
        assert s["paused"] is False and s["cron"] == "0 * * * *" and s["table_id"] == t["id"]
        listed = data(await c.call_tool("list_schedules", {"table_id": "Nums"}))["schedules"]
        assert [x["id"] for x in listed] == [s["id"]]
        assert [x["id"] for x in data(await c.call_tool("list_schedules", {}))["schedules"]] == [s["id"]]
        up = data(await c.call_tool("update_schedule", {"schedule_id": s["id"], "interval_seconds": 3600}))
        assert up["interval_seconds"] == 3600 and up["cron"] is None
        assert data(await c.call_tool("pause_schedule", {"schedule_id": s["id"]}))["paused"] is True
        assert data(await c.call_tool("pause_schedule", {"schedule_id": s["id"], "paused": False}))["paused"] is False
        assert data(await c.call_tool("trigger_schedule", {"schedule_id": s["id"]})) == {"id": s["id"], "triggered": True}
        # the firing runs the bulk workflow over the table: B gets computed (a bounded wait)
        with anyio.fail_after(30):
            while ws.api.get(f"/tables/{t['id']}/records/{rec['id']}").json()["fields"]["B"] != 2:
                await anyio.sleep(0.05)
        assert data(await c.call_tool("delete_schedule", {"schedule_id": s["id"]})) == {"id": s["id"], "deleted": True}
        assert error_code(await c.call_tool("trigger_schedule", {"schedule_id": s["id"]})) == "NOT_FOUND"


async def test_agent_and_channel_tools(ws, mcp):
    t = ws.create_table("Docs", [{"name": "Title", "type": "text"}])
    async with mcp(ws.builder_token) as c:
        a = data(await c.call_tool("create_agent", {"name": "Helper", "instructions": "be brief",
                                                    "table_ids": ["Docs"]}))
        assert a["table_ids"] == [t["id"]] and a["channels"] == []
        assert error_code(await c.call_tool("create_agent", {"name": "X", "table_ids": ["Nope"]})) == "NOT_FOUND"
        assert data(await c.call_tool("update_agent", {"agent_id": a["id"], "model": "m1"}))["model"] == "m1"
        assert data(await c.call_tool("get_agent", {"agent_id": a["id"]}))["name"] == "Helper"
        assert [x["id"] for x in data(await c.call_tool("list_agents", {}))["agents"]] == [a["id"]]
        ch = data(await c.call_tool("create_channel", {"agent_id": a["id"]}))
        assert ch["type"] == "web" and ch["token"].startswith("wds_chan_")
        slack = data(await c.call_tool("create_channel", {"agent_id": a["id"], "type": "slack"}))
        listed = data(await c.call_tool("list_channels", {"agent_id": a["id"]}))["channels"]
        assert [(x["id"], x["token"]) for x in listed] == [(ch["id"], ch["token"]), (slack["id"], None)]
        off = data(await c.call_tool("update_channel", {"channel_id": ch["id"], "enabled": False}))
        assert off["enabled"] is False
        rot = data(await c.call_tool("rotate_channel_token", {"channel_id": slack["id"]}))
        assert rot["token"].startswith("wds_chan_") and rot["token"] != slack["token"]
        assert data(await c.call_tool("delete_channel", {"channel_id": ch["id"]}))["deleted"]
        assert error_code(await c.call_tool("update_channel", {"channel_id": ch["id"], "enabled": True})) == "NOT_FOUND"
        assert data(await c.call_tool("delete_agent", {"agent_id": a["id"]}))["deleted"]
        assert error_code(await c.call_tool("get_agent", {"agent_id": a["id"]})) == "NOT_FOUND"


async def test_access_and_credential_tools(ws, mcp, base_url):
    t = ws.create_table("Shared", [{"name": "N", "type": "text"}])
    prof = ws.profile([])
    user = ws.token("user_mcp", profile_id=prof["id"])
    async with mcp(ws.builder_token) as c:
        profiles = data(await c.call_tool("list_access_profiles", {}))["profiles"]
        assert [(p["id"], p["grants"], p["tokens"]) for p in profiles] == [(prof["id"], [], 1)]
        g = data(await c.call_tool("grant_table_access", {"profile_id": prof["id"], "table_id": "Shared",
                                                          "read": True, "create": True}))
        assert (g["read"], g["create"], g["update"]) == (True, True, False)
        assert error_code(await c.call_tool("grant_table_access", {"profile_id": 999999, "table_id": "Shared"})) \
            == "NOT_FOUND"
        tokens = data(await c.call_tool("list_tokens", {}))["tokens"]
        assert {x["type"] for x in tokens} == {"vibe_mcp", "user_mcp"}
        assert all("token" not in x and "token_hash" not in x for x in tokens)
        cred = data(await c.call_tool("create_credential", {"name": "crm", "type": "header",
                                                            "header_name": "X-Api-Key", "secret": "s3cret",
                                                            "hosts": ["api.crm.example"]}))
        assert set(cred) == {"id", "name", "type", "header_name", "hosts", "created_at"}
        assert cred["hosts"] == ["api.crm.example"]
        assert error_code(await c.call_tool("create_credential", {"name": "crm", "type": "bearer",
                                                                  "secret": "x", "hosts": ["a.example"]})) == "CONFLICT"
        assert error_code(await c.call_tool("create_credential", {"name": "h", "type": "header",
                                                                  "secret": "x", "hosts": ["a.example"]})) \
            == "VALIDATION_ERROR"
        assert error_code(await c.call_tool("create_credential", {"name": "h", "type": "bearer", "secret": "x",
                                                                  "hosts": ["https://a.example/"]})) \
            == "INVALID_HOST_PATTERN"
        creds = data(await c.call_tool("list_credentials", {}))["credentials"]
        assert [x["name"] for x in creds] == ["crm"] and "s3cret" not in str(creds)
        assert data(await c.call_tool("delete_credential", {"credential": "crm"}))["deleted"]
        assert error_code(await c.call_tool("delete_credential", {"credential": cred["id"]})) == "NOT_FOUND"
    # the new grant applies to the user token at once
    async with mcp(user["token"]) as u:
        assert data(await u.call_tool("create_record", {"table_id": t["id"], "fields": {"N": "x"}}))["fields"]["N"] == "x"
        assert error_code(await u.call_tool("delete_record", {"table_id": t["id"], "record_id": 1})) == "FORBIDDEN"


async def test_batch_record_tools(ws, mcp):
    ws.create_table("Items", [{"name": "Name", "type": "text", "required": True}, {"name": "Qty", "type": "number"},
                                  {"name": "Twice", "type": "formula", "formula": "{Qty} * 2"}])
    async with mcp(ws.builder_token) as c:
        res = data(await c.call_tool("batch_create_records", {"table_id": "Items", "rows": [
            {"fields": {"Name": "a", "Qty": 1}}, {"Qty": 2}, {"Name": "c", "Qty": 3}]}))["results"]
        assert [("record" in r, r.get("code")) for r in res] == [(True, None), (False, "REQUIRED_FIELD"), (True, None)]
        assert res[0]["record"]["fields"]["Twice"] == 2
        upd = data(await c.call_tool("batch_update_records", {"table_id": "Items", "filters": {"Qty": "gte.1"},
                                                              "fields": {"Qty": 10}}))
        assert upd["updated"] == 2 and upd["pipeline"]["status"] == "ok"
        rows = data(await c.call_tool("list_records", {"table_id": "Items"}))["records"]
        assert {r["fields"]["Twice"] for r in rows} == {20}
        assert error_code(await c.call_tool("batch_update_records", {"table_id": "Items", "filters": {"Qty": "gte.1"},
                                                                     "fields": {"Twice": 1}})) == "READ_ONLY_COLUMN"
        # the list form, as every door takes it (one parser: storage.query.parse_filters)
        upd = data(await c.call_tool("batch_update_records", {
            "table_id": "Items", "filters": [{"column": "Qty", "op": "gte", "value": 10}, {"or": "(Name.eq.a,Name.eq.c)"}],
            "fields": {"Qty": 10}}))
        assert upd["updated"] == 2, upd
        run = data(await c.call_tool("run_actions", {"table_id": "Items", "columns": ["Twice"]}))
        assert run["status"] == "running" and run["total"] == 2
        assert error_code(await c.call_tool("run_actions", {"table_id": "Items", "columns": ["Nope"]})) == "NOT_FOUND"
        one = data(await c.call_tool("run_record_pipeline", {"table_id": "Items", "record_id": rows[0]["id"],
                                                             "mode": "create"}))
        assert one["record"]["fields"]["Twice"] == 20 and one["pipeline"]["status"] == "ok"
        assert error_code(await c.call_tool("run_record_pipeline", {"table_id": "Items", "record_id": 999999})) \
            == "NOT_FOUND"


async def test_batch_update_resolves_file_references_as_a_single_update_does(ws, mcp, base_url):
    """batch_update_records goes the way of a record's update: a file reference must name
    an object of this workspace, and a stored one reads back as the same signed URL."""
    storage = ws.client(ws.builder_token)
    storage.base_url = f"{base_url}/storage/v1"
    assert storage.post("/bucket", json={"name": "vault", "public": False}).status_code in (200, 201)
    assert storage.post("/object/vault/q.pdf", content=b"%PDF-1.4 q",
                        headers={"Content-Type": "application/pdf"}).status_code in (200, 201)
    t = ws.create_table("Papers", [{"name": "Name", "type": "text"}, {"name": "Doc", "type": "file"}])
    ids = [ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": n}}).json()["id"] for n in "ab"]
    async with mcp(ws.builder_token) as c:
        missing = await c.call_tool("batch_update_records", {"table_id": "Papers", "filters": {"Name": "in.(a,b)"},
                                                             "fields": {"Doc": [{"bucket": "vault", "path": "nope.pdf"}]}})
        assert error_code(missing) == "INVALID_VALUE"
        assert all(r["fields"]["Doc"] == [] for r in data(await c.call_tool("list_records", {"table_id": "Papers"}))["records"])
        upd = data(await c.call_tool("batch_update_records", {"table_id": "Papers", "filters": {"Name": "in.(a,b)"},
                                                              "fields": {"Doc": [{"bucket": "vault", "path": "q.pdf"}]}}))
        assert upd == {"updated": 2, "ids": ids}
        rows = data(await c.call_tool("list_records", {"table_id": "Papers"}))["records"]
    one = ws.api.patch(f"/tables/{t['id']}/records/{ids[0]}", json={"fields": {"Doc": [{"bucket": "vault", "path": "q.pdf"}]}})
    assert one.status_code == 200, one.text
    urls = [r["fields"]["Doc"][0] for r in rows]
    for url in [*urls, one.json()["fields"]["Doc"][0]]:
        assert "/storage/v1/object/sign/" in url, url  # resolved to the bucket's id and signed
        got = httpx.get(url)  # a signed URL needs no token
        assert got.status_code == 200 and got.content == b"%PDF-1.4 q"


async def test_column_tools_backfill_existing_rows_and_get_run_shows_it(ws, mcp):
    t = ws.create_table("Stock", [{"name": "Qty", "type": "number"}])
    ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": [{"Qty": i} for i in range(30)], "run_pipeline": False})
    async with mcp(ws.builder_token) as c:
        col = data(await c.call_tool("create_column", {"table_id": "Stock", "name": "Half", "type": "formula",
                                                       "formula": "{Qty} / 2"}))
        assert col["backfill"]["total"] == 30
        run: dict = {}
        for _ in range(300):
            run = data(await c.call_tool("get_run", {"run_id": col["backfill"]["run_id"]}))
            if run["status"] != "running":
                break
            await asyncio.sleep(0.1)
        assert run["status"] == "completed" and run["done"] == 30 and run["kind"] == "backfill", run
        rows = data(await c.call_tool("list_records", {"table_id": "Stock", "limit": 100}))["records"]
        assert {r["fields"]["Half"] for r in rows} == {i / 2 for i in range(30)}
        off = data(await c.call_tool("update_column", {"table_id": "Stock", "column": "Half", "formula": "{Qty}",
                                                       "backfill": False}))
        assert off["backfill"] is None
        assert error_code(await c.call_tool("get_run", {"run_id": "run-nope"})) == "NOT_FOUND"


@pytest.mark.parametrize("tool,args", [
    ("delete_table", {"table_id": 999999}),
    ("get_view", {"table_id": 999999, "view_id": 1}),
    ("delete_agent", {"agent_id": 999999}),
    ("delete_channel", {"channel_id": 999999}),
    ("delete_schedule", {"schedule_id": 999999}),
    ("batch_create_records", {"table_id": 999999, "rows": [{"a": 1}]}),
])
async def test_builder_tools_report_missing_things_as_not_found(ws, mcp, tool, args):
    async with mcp(ws.builder_token) as c:
        assert error_code(await c.call_tool(tool, args)) == "NOT_FOUND"


async def test_builder_tools_cannot_reach_another_workspace(make_workspace, mcp):
    a, b = make_workspace(), make_workspace()
    t = a.create_table("Private", [{"name": "N", "type": "text"}])
    async with mcp(b.builder_token) as c:
        assert error_code(await c.call_tool("get_table", {"table_id": t["id"]})) == "NOT_FOUND"
        assert error_code(await c.call_tool("delete_table", {"table_id": t["id"]})) == "NOT_FOUND"
        assert error_code(await c.call_tool("list_records", {"table_id": t["id"]})) == "NOT_FOUND"
