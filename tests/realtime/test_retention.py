"""Retention: old events are purged in the background, and a resume past it is told so."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.conftest import ApiProcess, Services, running_api
from tests.realtime.conftest import changes, open_ws, recv, subscribe


@pytest.fixture(scope="module")
def short_retention_api(services: Services) -> Iterator[ApiProcess]:
    yield from running_api(services, name="api-retention", WDS_REALTIME_RETENTION_S="1")


def test_a_resume_older_than_retention_gets_events_purged_not_silence(ws, short_retention_api):
    t = ws.create_table("R", [{"name": "Name", "type": "text"}])
    for name in ("old-1", "old-2"):
        ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": name}})
    deadline = time.monotonic() + 15
    while True:  # the purge runs about once a second with a one-second window
        with open_ws(short_retention_api.base_url, ws.builder_token) as conn:
            subscribe(conn, t["id"], since=0)
            first = recv(conn, timeout=5)
            if first["type"] == "error":
                break
        assert time.monotonic() < deadline, "events were never purged"
        time.sleep(0.5)
    assert first["code"] == "EVENTS_PURGED" and first["purged_through"] > 0
    with open_ws(short_retention_api.base_url, ws.builder_token) as conn:
        subscribe(conn, t["id"], since=first["purged_through"])
        ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": "new"}})
        assert changes(conn, 1)[0]["record"]["fields"]["Name"] == "new"
