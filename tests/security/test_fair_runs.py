"""Pipeline runs are shared fairly between workspaces under CPU pressure (issue #22 item 2,
api/services/fairness.py): a workspace past its share of runs a second waits before its
next pipeline write while another workspace is active, and never when it is alone; the
writes that waited still succeed, and nothing waits with the share turned off.

The API processes here take ``WDS_FAIR_CPU_PRESSURE=0`` (keep to the share whenever
another workspace is active, whatever the CPU: the test does not depend on how busy the
machine is) and a share of 2 runs a second. ``wds_fair_wait_seconds_total`` tells the
waits apart from a slow machine.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import api_process
from tests.observability.test_metrics import count

SHARE = 2
WRITES = 8


@pytest.fixture(scope="module")
def fair_url(services: Any) -> Iterator[str]:
    with api_process(services, name="api-fair", WDS_FAIR_CPU_PRESSURE="0",
                     WDS_FAIR_PIPELINE_RUNS_PER_S=str(SHARE)) as url:
        yield url


@pytest.fixture(scope="module")
def unfair_url(services: Any) -> Iterator[str]:
    with api_process(services, name="api-unfair", WDS_FAIR_CPU_PRESSURE="0",
                     WDS_FAIR_PIPELINE_RUNS_PER_S="0") as url:
        yield url


def _client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=f"{url}/functions/v1/rest-api", headers={"Authorization": f"Bearer {token}"},
                        timeout=60)


def _waited(url: str) -> float:
    return count(httpx.get(f"{url}/metrics").text, "wds_fair_wait_seconds_total")


def _flood(url: str, ws: Any, table_id: int, other: Any | None) -> float:
    """WRITES formula writes of ``ws`` back to back (``other`` reading between them, so
    it is active); returns the seconds they took, all answered 201 with B = 2A."""
    started = time.monotonic()
    with _client(url, ws.builder_token) as api, _client(url, other.builder_token if other else ws.builder_token) as peer:
        for i in range(WRITES):
            if other is not None:
                assert peer.get("/tables").status_code == 200
            r = api.post(f"/tables/{table_id}/records", json={"fields": {"A": i}})
            assert r.status_code == 201, r.text
            assert r.json()["fields"]["B"] == 2 * i
    return time.monotonic() - started


def _table(ws: Any) -> int:
    return ws.create_table("Fair", [{"name": "A", "type": "number"},
                                    {"name": "B", "type": "formula", "formula": "{A} * 2"}])["id"]


def test_a_workspace_alone_never_waits(fair_url: str, make_workspace: Any) -> None:
    ws = make_workspace()
    table_id = _table(ws)
    time.sleep(2.5)  # no other test's workspace is active any more
    before = _waited(fair_url)
    _flood(fair_url, ws, table_id, None)
    assert _waited(fair_url) == before


def test_past_its_share_a_workspace_waits_while_another_is_active(fair_url: str, make_workspace: Any) -> None:
    ws, other = make_workspace(), make_workspace()
    table_id = _table(ws)
    before = _waited(fair_url)
    took = _flood(fair_url, ws, table_id, other)
    waited = _waited(fair_url) - before
    # 8 runs at 2 a second: the first 2 go at once, the other 6 wait for the window
    assert waited >= 1.5, waited
    assert took >= 2.0, took
    # the reader was never held back: only pipeline writes take a turn
    with _client(fair_url, other.builder_token) as peer:
        started = time.monotonic()
        assert peer.get("/tables").status_code == 200
        assert time.monotonic() - started < 1.0


def test_with_the_share_off_nothing_waits(unfair_url: str, make_workspace: Any) -> None:
    ws, other = make_workspace(), make_workspace()
    before = _waited(unfair_url)
    _flood(unfair_url, ws, _table(ws), other)
    assert _waited(unfair_url) == before


def test_another_workspace_is_found_among_the_latest_two() -> None:
    from api.services.fairness import ACTIVE_S, RunFairness
    from api.services.limits import _MemoryStorage

    fair = RunFairness(SHARE, 0.0, _MemoryStorage())  # pressure limit 0: only activity decides
    fair.note(1)
    assert not fair.contended(1)  # alone
    assert fair.contended(2)  # a workspace that has not spoken yet sees 1
    fair.note(2)
    fair.note(2)
    fair.note(3)
    assert fair.contended(1) and fair.contended(2) and fair.contended(3)
    fair.latest = [(ws, t - ACTIVE_S - 1) for ws, t in fair.latest]  # all of them idle since
    assert not fair.contended(1) and not fair.contended(3)
    fair.note(3)
    assert not fair.contended(3) and fair.contended(1)


def test_a_heavy_workspace_gets_the_heavy_share() -> None:
    """A workspace flagged heavy (its last sandbox batch burned past its demotion
    threshold) keeps to ``heavy_runs_per_s`` (1) while another is active, even when the
    process is not short of CPU; the others keep their share (2), and only under
    pressure; a heavy workspace alone never waits."""
    import asyncio

    from api.services.fairness import RunFairness
    from api.services.limits import _MemoryStorage

    async def go() -> tuple[list[float], list[float], list[float]]:
        fair = RunFairness(SHARE, 0.0, _MemoryStorage(), heavy_runs_per_s=1)
        try:
            fair.note(2)
            fair.note(1)  # both active
            heavy = [await fair.admit(1, heavy=True) for _ in range(3)]
            light = [await fair.admit(2) for _ in range(2)]
            fair.latest = [(3, fair.latest[0][1])]  # workspace 3 alone
            alone = [await fair.admit(3, heavy=True) for _ in range(3)]
            return heavy, light, alone
        finally:
            await fair.close()

    async def unpressed() -> tuple[list[float], list[float]]:
        # a pressure limit of 1: never short of CPU; the light share never holds, the heavy one does
        fair = RunFairness(SHARE, 1.0, _MemoryStorage(), heavy_runs_per_s=1)
        try:
            fair.note(2)
            fair.note(1)
            return ([await fair.admit(1, heavy=True) for _ in range(2)],
                    [await fair.admit(2) for _ in range(4)])
        finally:
            await fair.close()

    heavy, light, alone = asyncio.run(go())
    assert heavy[0] == 0.0 and heavy[1] >= 0.9 and heavy[2] >= 0.9, heavy  # one a second
    assert light == [0.0, 0.0]  # two a second, in a window of their own
    assert alone == [0.0, 0.0, 0.0]
    heavy, light = asyncio.run(unpressed())
    assert heavy[0] == 0.0 and heavy[1] >= 0.9, heavy
    assert light == [0.0] * 4

    async def heavy_share_off() -> list[float]:
        fair = RunFairness(SHARE, 1.0, _MemoryStorage(), heavy_runs_per_s=0)  # 0: heavy is ordinary
        try:
            fair.note(2)
            fair.note(1)
            return [await fair.admit(1, heavy=True) for _ in range(4)]
        finally:
            await fair.close()

    assert asyncio.run(heavy_share_off()) == [0.0] * 4  # no pressure: no wait, as for any workspace


def test_a_workspace_burning_its_sandbox_budget_waits_for_the_heavy_share(fair_url: str, make_workspace: Any) -> None:
    """Through the API: after one batch of catastrophic regexes (past the demotion
    threshold), the workspace's next formula writes go at one a second while another
    workspace is active, each still answered with its budget errors."""
    ws, other = make_workspace(), make_workspace()
    regex = " & ".join(['REGEX_MATCH({T}, "(a|aa)+$")'] * 20)
    table_id = ws.create_table("Heavy", [{"name": "T", "type": "text"},
                                         {"name": "F", "type": "formula", "formula": regex}])["id"]
    row = {"fields": {"T": "a" * 30 + "!"}}
    with _client(fair_url, ws.builder_token) as api, _client(fair_url, other.builder_token) as peer:
        first = api.post(f"/tables/{table_id}/records", json=row)
        assert first.status_code == 201, first.text
        assert "budget_exceeded" in str(first.json()["pipeline"]["errors"]).lower()
        before = _waited(fair_url)
        started = time.monotonic()
        for _ in range(4):
            assert peer.get("/tables").status_code == 200
            r = api.post(f"/tables/{table_id}/records", json=row)
            assert r.status_code == 201, r.text
        took = time.monotonic() - started
    waited = _waited(fair_url) - before
    assert waited >= 2.0, waited  # at the share of 2 the four would wait about 1 s in all
    assert took >= 3.0, took
