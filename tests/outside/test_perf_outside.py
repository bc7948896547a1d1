"""Throughput of a 1,000-row run-actions whose http_request column calls a local echo
server with 5 ms latency, and the proxy's overhead per call over a direct httpx call in
the same run. Prints the figures; runs only with ``WDS_PERF=1`` (machine-dependent)."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from types import SimpleNamespace

import httpx
import pytest

from activities.egress import build_proxy_client
from activities.proxy import OutboundRequest, send

ROWS = 1000
pytestmark = pytest.mark.skipif(not os.environ.get("WDS_PERF"), reason="set WDS_PERF=1 to measure")


def test_run_actions_with_http_request_throughput(ws, echo):
    t = ws.create_table("Perf", [
        {"name": "N", "type": "number"},
        {"name": "Call", "type": "http_request", "config": {"url": echo.url + "/latency?ms=5&n={{ N }}"}},
    ])
    for i in range(0, ROWS, 500):
        r = ws.api.post(f"/tables/{t['id']}/records/batch",
                        json={"rows": [{"N": n} for n in range(i, i + 500)], "run_pipeline": False})
        assert r.status_code == 200
    echo.max_in_flight = 0
    before = len(echo.calls_to("/latency"))
    start = time.perf_counter()
    start_mono = time.monotonic()
    run_id = ws.api.post(f"/tables/{t['id']}/run-actions", json={"filters": {"N": "gte.0"}}).json()["run_id"]
    while True:
        run = ws.api.get(f"/runs/{run_id}").json()
        if run["status"] == "completed":
            break
        time.sleep(0.02)
    elapsed = time.perf_counter() - start
    assert run["done"] == ROWS and run["failed"] == 0
    assert len(echo.calls_to("/latency")) - before == ROWS
    arrivals = [c.at for c in echo.calls_to("/latency")[before:]]
    t0 = arrivals[0]
    hist = [0] * (int((arrivals[-1] - t0) * 4) + 1)
    for a in arrivals:
        hist[int((a - t0) * 4)] += 1
    print("\narrivals per 250 ms:", hist, f"first call {t0 - start_mono:.2f} s after start")
    print(f"\nrun-actions {ROWS} rows, http_request 5 ms: {elapsed:.2f} s = {ROWS / elapsed:.0f} rows/s,"
          f" max concurrency at the receiver {echo.max_in_flight}")


def test_proxy_overhead_per_call_over_direct_httpx(echo):
    async def measure() -> tuple[float, float]:
        proxy = build_proxy_client(SimpleNamespace(dev_mode=True, http_allowed_hosts=""))
        direct = httpx.AsyncClient()
        url = echo.url + "/latency?ms=0"
        d_times, p_times = [], []
        for _ in range(50):  # warm both connection pools
            await direct.get(url)
            await send(proxy, OutboundRequest("GET", url, {}, None, "k"), deadline=time.monotonic() + 10)
        for i in range(600):  # interleaved, so both see the same machine noise
            t0 = time.perf_counter()
            await direct.get(url, headers={"Idempotency-Key": "k"})
            t1 = time.perf_counter()
            out = await send(proxy, OutboundRequest("GET", url, {}, None, f"k{i}"), deadline=time.monotonic() + 10)
            t2 = time.perf_counter()
            assert out.error is None
            d_times.append(t1 - t0)
            p_times.append(t2 - t1)
        await proxy.aclose()
        await direct.aclose()
        return statistics.median(d_times) * 1000, statistics.median(p_times) * 1000

    direct_ms, proxy_ms = asyncio.run(measure())
    print(f"\nproxy p50 {proxy_ms:.2f} ms vs direct httpx p50 {direct_ms:.2f} ms:"
          f" overhead {proxy_ms - direct_ms:.2f} ms")
    assert proxy_ms - direct_ms <= 3.0
