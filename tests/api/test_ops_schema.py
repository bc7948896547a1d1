"""The operations layer stands alone (issue #23 item 9): table, column and agent
operations called directly with a principal and typed inputs — no HTTP, no route — make
the same changes REST then reports, and refuse with the same errors, changing nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from api.ops import agents as agent_ops
from api.ops import columns as column_ops
from api.ops import tables as table_ops
from api.ops.publish import share_url
from api.schemas import ColumnIn, ColumnPatch, TableIn, TablePatch
from api.services import limits
from api.state import AppState
from service.config import Settings
from storage import access
from storage.access import Principal
from storage.db import Database
from storage.errors import Conflict, Forbidden, NotFound


@pytest.fixture
async def state(services) -> AsyncIterator[AppState]:
    st = AppState(settings=Settings(database_url=services.pg.dsn), db=Database(services.pg.dsn))
    await st.db.open()
    try:
        yield st
    finally:
        await limits.stop(st)
        await st.db.close()


async def principal_of(state: AppState, secret: str) -> Principal:
    async with state.db.connection() as conn:
        principal = await access.resolve_token(conn, secret=secret)
    assert principal is not None
    return principal


async def test_table_and_column_operations_work_without_http(ws, state):
    builder = await principal_of(state, ws.builder_token)
    made = await table_ops.create_table(state, builder, TableIn.model_validate(
        {"name": "Ops", "columns": [{"name": "Name", "type": "text"}, {"name": "N", "type": "number"}]}))
    assert [c["name"] for c in made["columns"]] == ["Name", "N"]
    # REST, a separate process, reports what the operation made
    assert ws.api.get(f"/tables/{made['id']}").json() == made
    assert await table_ops.get_table(state, builder, "Ops") == made  # by name too

    col = await column_ops.create_column(state, builder, made["id"],
                                         ColumnIn.model_validate({"name": "Note", "type": "text"}))
    assert col["name"] == "Note" and col["backfill"] is None  # no rows: nothing to recompute
    renamed = await column_ops.update_column(state, builder, made["id"], col["id"],
                                             ColumnPatch.model_validate({"name": "Remark"}))
    assert renamed["name"] == "Remark"
    order = await column_ops.reorder_columns(state, builder, made["id"], ["Remark", made["columns"][1]["id"]])
    assert [c["name"] for c in order["columns"]] == ["Remark", "N", "Name"]
    assert [c["name"] for c in ws.api.get(f"/tables/{made['id']}/columns").json()] == ["Remark", "N", "Name"]

    patched = await table_ops.update_table(state, builder, made["id"], TablePatch.model_validate({"name": "Ops2"}))
    assert patched["name"] == "Ops2" and ws.api.get(f"/tables/{made['id']}").json()["name"] == "Ops2"
    assert await column_ops.delete_column(state, builder, made["id"], col["id"]) == {"id": col["id"], "deleted": True}
    assert await table_ops.delete_table(state, builder, made["id"]) == {"id": made["id"], "deleted": True}
    assert ws.api.get(f"/tables/{made['id']}").status_code == 404


async def test_operations_refuse_as_rest_does_and_change_nothing(ws, state):
    table = ws.create_table("Kept", [{"name": "Name", "type": "text"}])
    builder = await principal_of(state, ws.builder_token)
    reader = await principal_of(state, ws.token("rest_api")["token"])  # no grant on "Kept"

    with pytest.raises(Conflict) as err:
        await table_ops.create_table(state, builder, TableIn.model_validate({"name": "Kept", "columns": []}))
    assert err.value.code == "CONFLICT"
    with pytest.raises(Forbidden):
        await table_ops.update_table(state, reader, table["id"], TablePatch.model_validate({"name": "Taken"}))
    with pytest.raises(Forbidden):
        await column_ops.create_column(state, reader, table["id"], ColumnIn.model_validate({"name": "X", "type": "text"}))
    with pytest.raises(NotFound):
        await column_ops.update_column(state, builder, table["id"], 10**12, ColumnPatch.model_validate({"name": "Y"}))
    with pytest.raises(Forbidden):  # agents are the builder credential's
        await agent_ops.create_agent(state, reader, agent_ops.AgentIn(name="nope"))
    assert ws.api.get(f"/tables/{table['id']}").json() == table
    assert ws.api.get("/agents").json() == []

    agent = await agent_ops.create_agent(state, builder, agent_ops.AgentIn(name="helper", table_ids=[table["id"]]))
    assert ws.api.get(f"/agents/{agent['id']}").json() == agent
    channel = await agent_ops.create_channel(state, builder, agent["id"], agent_ops.ChannelIn(type="web"))
    assert channel["token"].startswith("wds_chan_")
    overview = await table_ops.workspace_overview(state, builder)
    assert overview == ws.api.get("/schema").json()
    assert [a["channels"] for a in overview["agents"]] == [[channel]]
    assert await agent_ops.delete_agent(state, builder, agent["id"]) == {"id": agent["id"], "deleted": True}
    with pytest.raises(NotFound):
        await agent_ops.get_agent(state, builder, agent["id"])
    assert share_url(state.settings, "abc").endswith("/p/abc")


async def test_agent_reads_are_the_builders_on_every_door(ws, state):
    """Reading agents and channels follows the rule of managing them, in the operations
    every door calls (REST, MCP builder tools, the schema overview): a rest_api or user_mcp
    principal is refused and sees no channel token."""
    table = ws.create_table("AgentTable", [{"name": "Name", "type": "text"}])
    builder = await principal_of(state, ws.builder_token)
    agent = await agent_ops.create_agent(state, builder, agent_ops.AgentIn(name="helper", table_ids=[table["id"]]))
    channel = await agent_ops.create_channel(state, builder, agent["id"], agent_ops.ChannelIn(type="web"))
    grant = {"table_id": table["id"], "read": True, "create": True, "update": True, "delete": True}
    for kind in ("rest_api", "user_mcp"):
        other = await principal_of(state, ws.token(kind, profile_id=ws.profile([grant])["id"])["token"])
        for call in (agent_ops.list_agents(state, other), agent_ops.get_agent(state, other, agent["id"]),
                     agent_ops.list_channels(state, other), agent_ops.list_channels(state, other, agent["id"]),
                     agent_ops.get_channel(state, other, channel["id"])):
            with pytest.raises(Forbidden):
                await call
        overview = await table_ops.workspace_overview(state, other)
        assert overview["agents"] == [] and [t["id"] for t in overview["tables"]] == [table["id"]]
    assert [a["id"] for a in (await table_ops.workspace_overview(state, builder))["agents"]] == [agent["id"]]
    assert (await agent_ops.get_channel(state, builder, channel["id"]))["id"] == channel["id"]
