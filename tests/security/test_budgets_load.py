"""A bounded loopback load test of the budgets (issue #22 item 2), functional only: while
20 clients of one workspace write rows whose formulas spin (``while(true){}``), backtrack
(``(a|aa)+$``, 20 times per formula) or whose templates build huge values (the attack of
:mod:`bench.hostile`), every write answers 200, another workspace's record GET answers and
``/healthz`` never fails, the API process itself uses a fraction of the phase's CPU (the
evaluation ran elsewhere: sandbox children and budgets), and its resident memory comes
back within a generous bound.

Latency is a performance figure, not asserted here: the other workspace's GET p99 idle and
under attack are printed, and measured as ratios against the idle p99 of the same run by
``python -m bench --only security.noisy_neighbour`` (``bench/scenarios/noisy.py``)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from bench.hostile import (
    CLIENTS,
    HOSTILE,
    cpu_seconds,
    rss_bytes,
    start_writers,
    stop_writers,
    table_body,
    warm_row,
)
from bench.report import percentile
from tests.conftest import ApiProcess, running_api

PHASE_S = 7.0
IDLE_SAMPLES = 60
# RSS after the attack may exceed its start by this factor at most: generous (the issue
# saw 0.3 → 4.1 GB before the budgets); the 10 % target is the bench's figure
RSS_BOUND = 1.5


@pytest.fixture(scope="module")
def lone_api(services) -> Iterator[ApiProcess]:
    """An API process of its own, so its memory and CPU are this test's alone."""
    yield from running_api(services, name="api-budgets-load")


def _client(base_url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=f"{base_url}/functions/v1/rest-api", headers={"Authorization": f"Bearer {token}"},
                        timeout=120)


def _tables(client: httpx.Client) -> list[int]:
    out = []
    for kind, column in HOSTILE.items():
        r = client.post("/tables", json=table_body(f"T-{kind}", column))
        assert r.status_code == 201, r.text
        out.append(r.json()["id"])
        # warm: one write of each kind (sandbox processes, V8 workers)
        assert client.post(f"/tables/{out[-1]}/records", json=warm_row()).status_code == 201
    return out


def _ms(samples: list[float]) -> str:
    p99 = percentile(samples, 99)
    return "—" if p99 is None else f"{p99 * 1000:.1f} ms"


def test_hostile_writers_are_answered_while_the_other_workspace_and_healthz_are_served(make_workspace, lone_api):
    base = lone_api.base_url
    pid = lone_api.proc.pid
    other, hostile = make_workspace(), make_workspace(plan="business")
    with _client(base, other.builder_token) as quiet, _client(base, hostile.builder_token) as attacker, \
            httpx.Client(timeout=120) as plain:
        t = quiet.post("/tables", json={"name": "Quiet", "columns": [{"name": "Note", "type": "text"}]}).json()
        rec = quiet.post(f"/tables/{t['id']}/records", json={"fields": {"Note": "hi"}}).json()
        path = f"/tables/{t['id']}/records/{rec['id']}"
        tables = _tables(attacker)
        idle = []
        for _ in range(IDLE_SAMPLES):
            started = time.perf_counter()
            assert quiet.get(path).status_code == 200
            idle.append(time.perf_counter() - started)
            time.sleep(0.02)
        rss_start = rss_bytes(pid)

        writers = start_writers(base, hostile.builder_token, tables)
        cpu_start = cpu_seconds(pid)
        latencies, gets, health = [], [], []
        deadline = time.monotonic() + PHASE_S
        try:
            while time.monotonic() < deadline:
                started = time.perf_counter()
                gets.append(quiet.get(path).status_code)
                latencies.append(time.perf_counter() - started)
                health.append(plain.get(f"{base}/healthz").status_code)
                time.sleep(0.05)
            api_cpu = cpu_seconds(pid) - cpu_start
        finally:
            writes = stop_writers(writers)
        time.sleep(2)  # the drained batches' leftovers finish
        rss_end = rss_bytes(pid)

    print(f"\n{CLIENTS} hostile writers, {len(writes)} writes: record GET p99 idle {_ms(idle)}, under attack "
          f"{_ms(latencies)}; API CPU {api_cpu:.1f} s in {PHASE_S:g} s; API RSS {rss_start / 2**20:.0f} -> "
          f"{rss_end / 2**20:.0f} MB (the ratios: python -m bench --only security.noisy_neighbour)")
    assert writes and set(writes) == {200}, sorted(set(writes))
    assert set(gets) == {200}, sorted(set(gets))
    assert set(health) == {200}, health
    # the event loop was not the one evaluating: the API process used a fraction of the phase
    assert api_cpu < PHASE_S / 2
    assert rss_end < RSS_BOUND * rss_start
