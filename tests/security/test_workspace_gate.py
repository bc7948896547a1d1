"""Each tenant's fair share of an API process (issue #22 item 2, docs/security.md): at
most ``requests_in_flight_per_workspace`` REST/SQL/MCP requests of one workspace run at
once; the others wait their turn and, past ``request_queue_timeout_s``, answer 503
``WORKSPACE_BUSY`` having changed nothing. Another workspace is never held up by it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from api.services.limits import WorkspaceGate
from storage.errors import Unavailable
from tests.conftest import ApiProcess, running_api

MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def test_the_gate_admits_in_order_and_times_out_waiters():
    async def run() -> None:
        gate = WorkspaceGate(2, wait_s=0.2)
        first, second = await gate.acquire(1), await gate.acquire(1)
        assert gate.running(1) == 2 and gate.running(2) == 0
        # a third request of workspace 1 waits, then answers 503 WORKSPACE_BUSY
        with pytest.raises(Unavailable) as info:
            await gate.acquire(1)
        assert info.value.code == "WORKSPACE_BUSY" and info.value.headers == {"Retry-After": "1"}
        # workspace 2 is not held up by workspace 1's slots
        other = await gate.acquire(2)
        other()
        # a waiter gets the slot the moment one is given back
        waiting = asyncio.create_task(gate.acquire(1))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        first()
        third = await asyncio.wait_for(waiting, 1)
        assert gate.running(1) == 2
        second()
        third()
        assert gate.running(1) == 0
        # 0 turns the gate off
        off = WorkspaceGate(0, wait_s=0.1)
        releases = [await off.acquire(1) for _ in range(50)]
        for r in releases:
            r()

    asyncio.run(run())


@pytest.fixture(scope="module")
def gated_api(services) -> Iterator[ApiProcess]:
    yield from running_api(services, name="api-gate", WDS_REQUESTS_IN_FLIGHT_PER_WORKSPACE="1",
                           WDS_REQUEST_QUEUE_TIMEOUT_S="0.3")


def _client(api: ApiProcess, token: str) -> httpx.Client:
    return httpx.Client(base_url=f"{api.base_url}/functions/v1/rest-api",
                        headers={"Authorization": f"Bearer {token}"}, timeout=60)


def test_a_busy_workspace_waits_its_turn_and_never_holds_up_another(make_workspace, gated_api):
    busy, other = make_workspace(), make_workspace()
    with _client(gated_api, busy.builder_token) as b, _client(gated_api, other.builder_token) as o:
        # a write that takes seconds without using the API's CPU: 20 values that each spin
        # until their CPU budget stops them, in the evaluation sandbox
        t = b.post("/tables", json={"name": "Slow", "columns": [
            {"name": "N", "type": "number"},
            {"name": "F", "type": "formula", "formula": "while(true){}", "config": {"language": "javascript"}}]})
        assert t.status_code == 201, t.text
        tid = t.json()["id"]
        q = o.post("/tables", json={"name": "Quiet", "columns": [{"name": "N", "type": "number"}]}).json()
        assert o.post(f"/tables/{q['id']}/records", json={"fields": {"N": 1}}).status_code == 201

        slow: dict[str, httpx.Response] = {}

        def write() -> None:
            slow["r"] = b.post(f"/tables/{tid}/records/batch", json={"rows": [{"N": i} for i in range(20)]})

        writer = threading.Thread(target=write)
        writer.start()
        seen: list[tuple[int, str]] = []
        other_statuses: list[int] = []
        mcp_busy = None
        mcp_during_write = False
        deadline = time.monotonic() + 60
        with httpx.Client(timeout=60) as plain:
            while writer.is_alive() and time.monotonic() < deadline:
                r = plain.get(f"{gated_api.base_url}/functions/v1/rest-api/tables/{tid}/records",
                              headers={"Authorization": f"Bearer {busy.builder_token}"})
                seen.append((r.status_code, r.json().get("code", "") if r.status_code != 200 else ""))
                if r.status_code == 503 and mcp_busy is None:
                    # the MCP door shares the workspace's slots
                    mcp_busy = plain.post(f"{gated_api.base_url}/functions/v1/mcp-server", json={
                        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                        "params": {"name": "list_records", "arguments": {"table_id": tid}}},
                        headers={**MCP_HEADERS, "Authorization": f"Bearer {busy.builder_token}"})
                    mcp_during_write = writer.is_alive()  # the write still held the slot when MCP answered
                other_statuses.append(o.get(f"/tables/{q['id']}/records").status_code)
        writer.join(60)
        assert slow["r"].status_code == 200, slow["r"].text
        # while the write held the workspace's one slot, its other requests waited and then
        # were refused; the other workspace answered every time
        assert (503, "WORKSPACE_BUSY") in seen, seen
        assert set(seen) <= {(503, "WORKSPACE_BUSY"), (200, "")}, seen
        assert other_statuses and set(other_statuses) == {200}, other_statuses
        assert mcp_busy is not None
        if mcp_during_write:
            assert mcp_busy.status_code == 503, mcp_busy.text
            assert mcp_busy.json()["code"] == "WORKSPACE_BUSY" and mcp_busy.headers["retry-after"] == "1"
        else:  # the write ended while MCP waited: it got the slot
            assert mcp_busy.status_code == 200, mcp_busy.text
        # the refused requests changed nothing; with the slot free the workspace answers again
        listed = b.get(f"/tables/{tid}/records", params={"limit": "100"})
        assert listed.status_code == 200 and len(listed.json()["records"]) == 20
